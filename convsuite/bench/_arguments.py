"""Argument checkers shared by the ``python -m convsuite.bench.<module>`` command lines.

Most are argparse ``type=`` functions: a bad value becomes a one-line usage
error (exit status 2) naming the option, what is accepted and what was
received, before any measuring starts. The last few (:func:`one_of`,
:func:`check_output_dir`) are the same checks for library calls: they raise
``ValueError`` naming the parameter instead.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "backend_name",
    "backend_names",
    "check_output_dir",
    "existing_folder",
    "folder",
    "folder_or_nowhere",
    "gpu_unavailable",
    "known_backends",
    "names_among",
    "one_of",
    "out_file",
    "positive",
    "positive_float",
]


def positive(text: str) -> int:
    """An integer >= 1 (the command lines' counts; ``convsuite.cli`` uses it too)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (NaN and inf refused: NaN fails every comparison, inf passes ``> 0``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text!r}")
    return value


def known_backends() -> list[str]:
    """The names of every registered backend, sorted."""
    from .. import list_backends

    return sorted(b.name for b in list_backends())


def names_among(
    known: Callable[[], Sequence[str]], what: str, *, allow_empty: bool = False
) -> Callable[[str], list[str]]:
    """A ``type=`` for comma-separated names among ``known()`` (read when the option is parsed), each kept
    once, in order; ``''`` only with ``allow_empty``. ``what`` names them in the message.
    """

    def check(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        choices = known()
        unknown = [n for n in names if n not in choices]
        if unknown or (not names and not allow_empty):
            got = ", ".join(map(repr, unknown)) if unknown else repr(text)
            raise argparse.ArgumentTypeError(f"must be comma-separated {what} among {', '.join(choices)}; got {got}")
        return list(dict.fromkeys(names))

    return check


def backend_names(*, allow_empty: bool = False) -> Callable[[str], list[str]]:
    """A ``type=`` for a comma-separated list of registered backend names (``''`` only with ``allow_empty``)."""
    return names_among(known_backends, "backend names", allow_empty=allow_empty)


def backend_name(text: str) -> str:
    """One registered backend name."""
    known = known_backends()
    if text not in known:
        raise argparse.ArgumentTypeError(f"must be one backend name among {', '.join(known)}; got {text!r}")
    return text


def _blocking_file(path: Path) -> Path | None:
    """The path itself or its nearest existing ancestor, if that is not a folder (so no folder can be made there)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def folder(text: str) -> Path:
    """A folder to write into: it may not exist yet, but neither it nor a parent may be a file."""
    path = Path(text)
    blocking = _blocking_file(path)
    if blocking is not None:
        raise argparse.ArgumentTypeError(
            f"must be a folder (existing or to create); got {text!r}, and {blocking} is a file"
        )
    return path


def out_file(text: str) -> Path:
    """A file to write: not an existing folder, and no parent of it may be a file."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"must be a file to write; got {text!r}, which is a folder")
    blocking = _blocking_file(path.parent)
    if blocking is not None:
        raise argparse.ArgumentTypeError(f"must be a file in a folder; got {text!r}, and {blocking} is a file")
    return path


def existing_folder(text: str) -> Path:
    """A folder that exists."""
    path = Path(text)
    if not path.is_dir():
        what = "a file" if path.exists() else "missing"
        raise argparse.ArgumentTypeError(f"must be an existing folder; got {text!r}, which is {what}")
    return path


def folder_or_nowhere(text: str) -> Path | str:
    """As :func:`folder`, or ``''`` for nowhere."""
    return "" if text == "" else folder(text)


def gpu_unavailable() -> str | None:
    """Why the GPU backend (cupy) cannot run here, or None when it can."""
    from .. import get_backend

    verdict = get_backend("cupy").available()
    return None if verdict is True else str(verdict)


def one_of(value: object, choices: Sequence[str], name: str) -> str:
    """``value`` when it is one of the names ``choices``; else a ValueError naming ``name`` and the choices.

    A value that is not a string (a list, say) is refused the same way: looked
    up in a dict, it would raise ``TypeError: unhashable type`` naming nothing.
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_output_dir(out: str | Path, what: str = "--out") -> Path:
    """Create the folder ``out`` if needed and prove a file can be written there; ValueError if not.

    ``what`` names the argument in the messages: ``"--out"`` for a command
    line, ``"`out`"`` for a library call.
    """
    if not isinstance(out, (str, Path)):
        raise ValueError(f"{what} must be a folder path (str or pathlib.Path); got {out!r}")
    # An empty string would put the reports among the user's files in the current folder. (A
    # Path("") is Path("."), which names that folder on purpose, and cannot be told apart.)
    if not str(out).strip():
        raise ValueError(f"{what} must name a folder; got an empty string")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a file, not a folder")
    try:  # a file above it, a read-only or full disk: mkdir or the test file says which
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".convsuite-write-test-"):
            pass
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} is not writable ({exc.strerror or exc})") from None
    return path
