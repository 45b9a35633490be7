"""Files in and out: output checks before the work, atomic writes, strict JSON, capped reads.

Every file convsuite writes goes through :func:`atomic_write_bytes` (or its
text and JSON forms): the data goes to a temporary file in the target's own
folder, is flushed to disk (``fsync``) and renamed over the target
(``os.replace``), so a reader sees the old file or the new one, never half of
one. With ``fallback=True`` a failure to write keeps the data anyway, in a
file next to the target or in the temporary folder, and the returned
:class:`Saved` says where in one line (:attr:`Saved.warning`).

JSON is written strict (``allow_nan=False``): a NaN or infinity, which JSON
cannot hold, is written as ``null`` and the document gets a ``non_finite``
field naming each such value and saying why it is null.

:func:`check_writable_file` proves, before the work, that a file can be
written where asked; :func:`read_json` and :func:`read_text` read a file the
project wrote (or a user's input file) with a size cap and raise
``ValueError`` naming the file for anything that is not what it should be.

A leaf module: it imports only the standard library.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import secrets
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "NON_FINITE_KEY",
    "Saved",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable_file",
    "json_text",
    "read_json",
    "read_text",
]

#: The field a JSON document gets when some of its numbers were not finite (written as null).
NON_FINITE_KEY = "non_finite"

#: Largest file :func:`read_text` reads unless told otherwise: a results file is far smaller.
DEFAULT_MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Saved:
    """Where a write put its data.

    Attributes
    ----------
    path : Path
        The file that holds the data.
    wanted : Path
        The file asked for; ``path == wanted`` unless the write fell back.
    problem : str or None
        Why it is not at ``wanted`` (the error of the failed write), or None.
    """

    path: Path
    wanted: Path
    problem: str | None = None

    @property
    def moved(self) -> bool:
        """Whether the data is somewhere other than where it was asked to go."""
        return self.problem is not None

    @property
    def warning(self) -> str | None:
        """One line saying where the data went instead, or None when it is where asked."""
        if self.problem is None:
            return None
        return f"could not write {self.wanted} ({self.problem}); saved it to {self.path} instead"


def _reason(exc: OSError) -> str:
    """An OSError as its short text ('Permission denied'), not its repr."""
    return exc.strerror or str(exc) or type(exc).__name__


def _temporary(folder: Path, name: str) -> tuple[int, Path]:
    """A new file in ``folder`` for ``name``'s data, opened for writing; its descriptor and path.

    ``os.open`` with mode 0o666 lets the umask decide the permissions, as a
    plain ``open`` would (``mkstemp``'s files are private to their owner).
    """
    for _ in range(100):
        path = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {folder}")


def _fsync_folder(folder: Path) -> None:
    """Flush the folder's entry of a renamed file (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _replace_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file in its folder, fsync and ``os.replace``."""
    fd, tmp = _temporary(target.parent, target.name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:  # an existing file keeps its permissions, as an overwrite in place would
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        except OSError:
            pass
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(target.parent)


def _fallback(wanted: Path, data: bytes) -> Path:
    """Save ``data`` next to ``wanted`` or, failing that, in the temporary folder; the path used."""
    stem, suffix = wanted.stem or "data", wanted.suffix
    errors = []
    for folder in (wanted.parent, Path(tempfile.gettempdir())):
        try:
            fd, path = tempfile.mkstemp(prefix=f"{stem}.unsaved-", suffix=suffix, dir=folder)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            return Path(path)
        except OSError as exc:
            errors.append(f"{folder}: {_reason(exc)}")
    raise OSError(f"could not save {wanted} anywhere ({'; '.join(errors)})")


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fallback: bool = False) -> Saved:
    """Write ``data`` to ``path`` atomically: a reader sees the old file or the new one, never part of one.

    Parameters
    ----------
    path : str or path-like
        The file; a symbolic link is followed (the file it names is replaced).
    data : bytes
    fallback : bool, default False
        On failure, save the data next to ``path`` or in the temporary
        folder and say so in the result, instead of raising.

    Returns
    -------
    Saved
        Where the data is; ``Saved.warning`` is the line to show when it fell back.

    Raises
    ------
    OSError
        The write failed (and, with ``fallback``, so did both fallbacks).
    """
    wanted = Path(path)
    target = Path(os.path.realpath(wanted)) if wanted.is_symlink() else wanted
    try:
        if target.is_dir():  # os.replace onto a folder fails after the temporary file is written
            raise IsADirectoryError(21, "it is a folder", str(target))
        _replace_atomically(target, bytes(data))
    except OSError as exc:
        if not fallback:
            raise
        return Saved(_fallback(wanted, bytes(data)), wanted, _reason(exc))
    return Saved(wanted, wanted)


def atomic_write_text(path: str | os.PathLike, text: str, *, fallback: bool = False, encoding: str = "utf-8") -> Saved:
    """:func:`atomic_write_bytes` of ``text`` in ``encoding`` (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding), fallback=fallback)


# --- strict JSON --------------------------------------------------------------------------------------------


def _plain(value: Any, where: str, replaced: dict[str, str]) -> Any:
    """``value`` as plain JSON data: NaN and infinities as None (noted in ``replaced``), NumPy values as Python's."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        replaced[where or "(the document)"] = repr(number)
        return None
    if isinstance(value, Mapping):
        return {_key(k): _plain(v, f"{where}.{_key(k)}" if where else _key(k), replaced) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]", replaced) for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # NumPy arrays and scalars (np.bool_ is no numbers.Integral)
    if callable(tolist):
        return _plain(tolist(), where, replaced)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)  # a dtype, an enum...: its text, as json.dumps(default=str) wrote it


def _key(key: Any) -> str:
    """A mapping key as JSON's string key (json.dumps turns numbers into strings; tuples it refuses)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, numbers.Integral):
        return str(int(key))
    return str(key)


def json_text(document: Mapping, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """``document`` as strict JSON text (``allow_nan=False``), ending with a newline.

    A NaN or infinity anywhere in it is written as ``null``, and the document
    gets a ``"non_finite"`` field: ``{"note": why, "values": {where: what}}``.
    NumPy scalars and arrays become JSON numbers and lists; other objects
    their ``str``.

    Raises
    ------
    TypeError
        ``document`` is not a mapping (there would be no place for the note).
    """
    if not isinstance(document, Mapping):
        raise TypeError(f"a JSON document written by convsuite is a mapping; got {type(document).__name__}")
    replaced: dict[str, str] = {}
    plain = _plain(document, "", replaced)
    if replaced:
        plain[NON_FINITE_KEY] = {
            "note": "these values were not finite numbers (NaN or infinity), which JSON cannot hold: "
            "they are written as null",
            "values": replaced,
        }
    return json.dumps(plain, indent=indent, sort_keys=sort_keys, allow_nan=False) + "\n"


def atomic_write_json(
    path: str | os.PathLike,
    document: Mapping,
    *,
    indent: int | None = 2,
    sort_keys: bool = False,
    fallback: bool = False,
) -> Saved:
    """:func:`atomic_write_bytes` of :func:`json_text` ``(document)``: strict JSON, non-finite numbers as null."""
    return atomic_write_text(path, json_text(document, indent=indent, sort_keys=sort_keys), fallback=fallback)


# --- checks before the work ---------------------------------------------------------------------------------


def check_writable_file(path: str | os.PathLike, name: str) -> Path:
    """Prove ``path`` can be written (creating its folder if needed); ValueError naming ``name`` if not.

    Checked before the work that produces the file, so that a file that
    cannot be written does not throw a finished run away: the path must not
    be a folder, nothing above it may be a file, and a file must be
    creatable in its folder (the same temporary file the atomic write makes).
    """
    if not isinstance(path, (str, os.PathLike)) or not str(os.fspath(path)).strip():
        raise ValueError(f"{name} must be a file path; got {path!r}")
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a folder, not a file that can be written")
    folder = target.parent
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise ValueError(f"{name} {str(path)!r} cannot be written: {str(above)!r} is a file, not a folder")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = _temporary(folder, target.name)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{name} {str(path)!r} cannot be written ({_reason(exc)})") from None
    return Path(path)


# --- reading ------------------------------------------------------------------------------------------------


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    """A descriptor of ``path`` if it is a regular file (created with ``os.O_CREAT`` in ``flags``), else OSError.

    The file is opened without blocking: a FIFO (or a device) in place of a
    file would make a plain ``open`` wait for a writer forever. Anything but
    a regular file is refused once opened, before a byte is read.
    """
    fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.fspath(path)!r} is not a regular file")
        os.set_blocking(fd, True)  # a regular file: reads and writes as usual
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_text(path: str | os.PathLike, label: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped), at most ``max_bytes`` of it.

    Raises
    ------
    ValueError
        ``"{label}: why"``: a folder, a file that cannot be read, a larger
        one (never read past the cap), or one that is not UTF-8 text.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{label}: is a folder, not a file")
    try:
        with os.fdopen(open_regular(path), "rb") as handle:  # a FIFO or a device is refused, never waited on
            data = handle.read(max_bytes + 1)  # never more than the cap, whatever the size says
    except OSError as exc:
        raise ValueError(f"{label}: cannot be read ({_reason(exc)})") from None
    if len(data) > max_bytes:
        raise ValueError(f"{label}: larger than the {max_bytes:,} bytes such a file can be")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark, as some Windows editors write, is no content
    except UnicodeDecodeError as exc:  # a binary file: the codec's message names no file
        raise ValueError(f"{label}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _ends_open(text: str) -> bool:
    """Whether ``text`` stops inside a string or with a bracket left open: a file cut short, not a foreign one."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return in_string or depth > 0 or not text.strip()


def read_json(path: str | os.PathLike, label: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The JSON document in ``path``; ValueError ``"{label}: why"`` for any file that is not one.

    Refused with the reason: a folder, an unreadable or oversized file, a
    binary one, invalid JSON (a file that ends early is called cut short),
    nesting deeper than the parser's stack, an integer too long to convert.
    NaN and Infinity, which Python's own writer used to emit, are read as
    floats: the caller checks the values it uses.
    """
    text = read_text(path, label, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if _ends_open(text):
            raise ValueError(f"{label}: not JSON: it ends early (cut short? {exc.msg} at line {exc.lineno})") from None
        raise ValueError(f"{label}: not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{label}: its JSON is nested too deeply for a file of this kind") from None
    except ValueError as exc:  # an integer past Python's digit limit for str -> int
        raise ValueError(f"{label}: not readable JSON ({str(exc).splitlines()[0][:120]})") from None
