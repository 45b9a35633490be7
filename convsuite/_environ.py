"""Environment variables read on the per-call path, at the cost of a dict lookup."""

from __future__ import annotations

import os
from typing import Callable

__all__ = ["environment_reader"]


def environment_reader(name: str) -> Callable[[], str | None]:
    """A callable returning ``os.environ.get(name)`` (None when unset), read anew on every call.

    ``os.environ.get`` is a Python-level mapping lookup that encodes the key
    each time (0.7 us on the 2-core VM, a tenth of a tiny conv's host path);
    CPython keeps the environment in ``os.environ._data`` under encoded keys,
    a dict that every update through ``os.environ`` (item assignment, ``del``,
    pytest's ``monkeypatch.setenv``) changes in place. Where that private
    layout is absent (another implementation), or once ``os.environ`` itself
    was replaced, the public lookup.
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode, decode = getattr(environ, "encodekey", None), getattr(environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:
        return lambda: os.environ.get(name)
    key = encode(name)

    def read() -> str | None:
        if os.environ is not environ:  # os.environ replaced wholesale: its own lookup
            return os.environ.get(name)
        raw = data.get(key)
        return None if raw is None else decode(raw)

    return read
