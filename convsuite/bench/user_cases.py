"""The user's own problems as comparison cases: shapes, case files, size sweeps.

``convsuite compare --op conv2d --x 8,64,56,56 --w 64,64,3,3 --padding same``
builds one :class:`~convsuite.bench.workloads.Case` with :func:`custom_case`;
``--cases FILE`` reads several (:func:`load_cases_file`); ``--sweep B=1,8,64``
turns each case into a family of sizes (:func:`parse_sweep`,
:func:`apply_sweep`). Every function here checks its input completely and
raises ``ValueError`` with one line naming what was wrong, so that nothing
is measured before every case is known to be valid.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import INDEX_LIMIT
from .workloads import Case

__all__ = [
    "SWEEP_VARIABLES",
    "apply_sweep",
    "custom_case",
    "load_cases_file",
    "parse_geometry",
    "parse_shape",
    "parse_sweep",
]

#: What ``--sweep`` can vary: the letter, and what it means.
SWEEP_VARIABLES = {
    "B": "batch",
    "C": "input channels",
    "M": "output channels",
    "H": "input height (2-D)",
    "W": "input width (2-D), or length (1-D with channels)",
    "N": "length of a plain 1-D signal",
    "K": "kernel size (every spatial dimension)",
}

_CASE_KEYS = {"name", "op", "x", "w", "stride", "padding", "dilation", "groups", "bias", "direction"}
_DIRECTIONS = ("forward", "backward")


def parse_shape(text: Any, what: str) -> tuple[int, ...]:
    """A shape from ``"8,64,56,56"`` (or a list of ints); ``what`` names the option."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    elif isinstance(text, str):
        parts = [p.strip() for p in text.replace("x", ",").split(",")]
    else:
        raise ValueError(f"{what} must be a comma-separated list of positive integers; got {text!r}")
    shape = tuple(v for v in (_whole(p) for p in parts) if v is not None)
    if (
        not shape
        or len(shape) != len(parts)
        or any(not 1 <= s < INDEX_LIMIT for s in shape)  # 10**30 overflowed NumPy's shape type
        or len(shape) > 4
    ):
        raise ValueError(
            f"{what} must be 1 to 4 comma-separated positive integers below 2**62, e.g. 8,64,56,56; got {text!r}"
        )
    return shape


def _whole(value: Any) -> int | None:
    """``value`` as an int when it is one (an int, or a string of digits), else None.

    A float such as 1.5 from a cases file is not a size (``int()`` truncated it), nor is a bool.
    """
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def parse_geometry(text: Any, what: str) -> Any:
    """``stride``/``padding``/``dilation`` from the command line: ``2``, ``2,1``, ``same``, ``1:2,0:1``.

    A word (``same``, ``valid``, ``full``) is passed through; ``lo:hi`` pairs
    are per-side padding. The value is checked by convsuite's own validation
    when the case is built, so the wording of its errors is the library's.
    """
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text.isalpha():
        return text
    try:
        parts = [p.strip() for p in text.split(",")]
        if any(":" in p for p in parts):
            value = tuple(tuple(int(v) for v in p.split(":")) for p in parts)
        else:
            value = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"{what} must be an integer, integers separated by commas, lo:hi pairs or a word such as same; got {text!r}"
        ) from None
    return value[0] if len(value) == 1 else value


def _infer_op(w_shape: tuple[int, ...]) -> str:
    """conv1d for (K,) and (M, C, K) weights, conv2d for (KH, KW) and (M, C, KH, KW)."""
    return "conv1d" if len(w_shape) in (1, 3) else "conv2d"


def _short(shape: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in shape)


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(":".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


def custom_case(
    x: Any,
    w: Any,
    op: str | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: Any = 1,
    bias: bool = True,
    direction: str = "forward",
    name: str | None = None,
    dtype: str = "float32",
) -> Case:
    """One case from shapes and geometry, validated as a call would be.

    Parameters
    ----------
    x, w : str or sequence of int
        Input and weight shapes in the caller's layout, e.g. ``"8,64,56,56"``.
    op : {"conv1d", "conv2d"}, optional
        Inferred from the weight's rank when omitted.
    stride, padding, dilation : int, tuple or str
        As :func:`convsuite.conv2d` takes them (strings are parsed by
        :func:`parse_geometry`).
    groups : int
    bias : bool
        Whether the forward pass adds a bias.
    direction : {"forward", "backward"}
    name : str, optional
        Label in the tables; a description of the shapes by default.
    dtype : str
        The dtype the validation assumes.

    Raises
    ------
    ValueError
        On any invalid value, with one line that names it.
    """
    x_shape, w_shape = parse_shape(x, "--x"), parse_shape(w, "--w")
    if op is None:
        op = _infer_op(w_shape)
    if op not in ("conv1d", "conv2d"):
        raise ValueError(f"--op must be conv1d or conv2d; got {op!r}")
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be forward or backward; got {direction!r}")
    whole = _whole(groups)
    if whole is None:  # int() truncated 1.5 to 1 and read True as 1
        raise ValueError(f"--groups must be a positive integer; got {groups!r}")
    groups = whole
    if not isinstance(bias, (bool, np.bool_)):  # bool("false") is True
        raise ValueError(f"bias must be true or false; got {bias!r}")
    stride = parse_geometry(stride, "--stride")
    padding = parse_geometry(padding, "--padding")
    dilation = parse_geometry(dilation, "--dilation")
    label = name or (
        f"{op} {_short(x_shape)} * {_short(w_shape)}"
        + "".join(
            f" {key}={_describe(value)}"
            for key, value, default in (("s", stride, 1), ("p", padding, 0), ("d", dilation, 1), ("g", groups, 1))
            if value != default
        )
    )
    case = Case(
        "custom",
        label,
        op,
        x_shape,
        w_shape,
        stride=stride,
        padding=padding,
        groups=groups,
        bias=bool(bias),
        direction=direction,
        dilation=dilation,
    )
    check_case(case, dtype)
    return case


def check_case(case: Case, dtype: str = "float32") -> None:
    """Validate a case exactly as a call would (no input is allocated); ValueError if invalid."""
    ndim = 1 if case.op == "conv1d" else 2
    if len(case.w_shape) not in ((1, 3) if ndim == 1 else (2, 4)):
        ranks = "(K,) or (M, C/groups, K)" if ndim == 1 else "(KH, KW) or (M, C/groups, KH, KW)"
        raise ValueError(f"case {case.name!r}: {case.op} takes a weight of shape {ranks}; got {case.w_shape}")
    try:
        spec = case.spec(dtype)
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:  # MemoryError: an output past RAM
        raise ValueError(f"case {case.name!r}: {exc}") from None
    if spec.ndim != ndim:
        raise ValueError(f"case {case.name!r}: shapes {case.x_shape} and {case.w_shape} are not a {case.op}")


def parse_sweep(texts: list[str]) -> dict[str, tuple[int, ...]]:
    """``["B=1,8,64", "K=3,5"]`` as ``{"B": (1, 8, 64), "K": (3, 5)}``."""
    sweep: dict[str, tuple[int, ...]] = {}
    for text in texts:
        var, sep, values = text.partition("=")
        var = var.strip()
        if not sep or var not in SWEEP_VARIABLES:
            raise ValueError(
                f"--sweep must be VAR=v1,v2,... with VAR one of {', '.join(SWEEP_VARIABLES)}; got {text!r}"
            )
        if var in sweep:
            raise ValueError(f"--sweep gives {var} twice")
        sweep[var] = _sizes(values, var)
    return sweep


def _sizes(values: str, var: str) -> tuple[int, ...]:
    """The positive integers of one sweep variable."""
    try:
        parsed = tuple(int(v) for v in values.split(","))
    except ValueError:
        parsed = ()
    if not parsed or any(not 1 <= v < INDEX_LIMIT for v in parsed):
        raise ValueError(f"--sweep {var} must be comma-separated positive integers below 2**62; got {values!r}")
    return parsed


def _resized(case: Case, var: str, value: int) -> Case:
    """The case with one size variable set; ValueError if it has no such size."""
    x, w = list(case.x_shape), list(case.w_shape)
    plain = len(w) in (1, 2) and len(x) == len(w)  # a signal (N,) or an image (H, W)
    spatial = len(w) if plain else len(w) - 2
    if var == "N":
        if not (plain and len(x) == 1):
            raise ValueError(f"--sweep N applies to a plain 1-D signal (--x N --w K); case {case.name!r} is not one")
        x[0] = value
    elif var == "K":
        w[len(w) - spatial :] = [value] * spatial
    elif plain:
        raise ValueError(f"--sweep {var} needs the (B, C, ...) layout; case {case.name!r} is a plain signal or image")
    elif var == "B":
        if len(x) == len(w):
            x[0] = value
        else:
            raise ValueError(f"--sweep B needs an input with a batch axis; case {case.name!r} has none")
    elif var == "C":
        if value % case.groups:
            raise ValueError(f"--sweep C={value} is not divisible by groups={case.groups} in case {case.name!r}")
        x[-spatial - 1] = value
        w[1] = value // case.groups
    elif var == "M":
        w[0] = value
    elif var == "H":
        if spatial != 2:
            raise ValueError(f"--sweep H applies to 2-D cases; case {case.name!r} is 1-D")
        x[-2] = value
    elif var == "W":
        x[-1] = value
    return replace(case, x_shape=tuple(x), w_shape=tuple(w))


def apply_sweep(cases: list[Case], sweep: dict[str, tuple[int, ...]], dtype: str = "float32") -> list[Case]:
    """Every case at every combination of the swept sizes, grouped into families.

    A family is one base case; its members differ only in the swept sizes, so
    the time-vs-size plot draws one line through each family and contender.
    """
    if not sweep:
        return cases
    swept = []
    variables = list(sweep)
    for base in cases:
        family = f"{base.name} [{' '.join(f'{v}' for v in variables)} swept]"
        for values in itertools.product(*(sweep[v] for v in variables)):
            case = base
            for var, value in zip(variables, values):
                case = _resized(case, var, value)
            setting = " ".join(f"{v}={value}" for v, value in zip(variables, values))
            shapes = f"{case.op} {_short(case.x_shape)} * {_short(case.w_shape)}"
            label = shapes if base.workload == "custom" else base.name
            case = replace(case, name=f"{label} ({setting})", family=family)
            check_case(case, dtype)
            swept.append(case)
    return swept


def _read_structured(path: Path) -> Any:
    """JSON, or YAML when the file says so and PyYAML is installed; ValueError naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # a binary file: the codec's message names no file
        raise ValueError(f"--cases {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"--cases {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return _parse_structured(path, text)
    except RecursionError:  # nesting deeper than the parser's stack: no cases file is like that
        raise ValueError(f"--cases {path}: nested too deeply to be a list of cases") from None


def _parse_structured(path: Path, text: str) -> Any:
    """The parsed text of ``path``: YAML for .yaml/.yml, else JSON."""
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(f"--cases {path}: reading YAML needs PyYAML (pip install pyyaml); or use JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"--cases {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--cases {path}: not valid JSON ({exc})") from None


def load_cases_file(path: str | Path, dtype: str = "float32") -> list[Case]:
    """Cases from a JSON (or YAML) file: a list of objects, or ``{"cases": [...]}``.

    Each object has ``x`` and ``w`` (shapes, as lists or ``"8,64,56,56"``)
    and optionally ``name``, ``op``, ``stride``, ``padding``, ``dilation``,
    ``groups``, ``bias`` (true/false) and ``direction`` (forward, backward).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--cases {path}: no such file")
    data = _read_structured(path)
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
    if not isinstance(data, list) or not data:
        raise ValueError(f'--cases {path}: expected a non-empty list of cases (or {{"cases": [...]}})')
    cases = []
    for i, entry in enumerate(data):
        where = f"--cases {path}, case {i + 1}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object with x and w; got {entry!r}")
        unknown = set(entry) - _CASE_KEYS
        if unknown or "x" not in entry or "w" not in entry:
            raise ValueError(
                f"{where}: keys must include x and w, and may be {', '.join(sorted(_CASE_KEYS - {'x', 'w'}))}; "
                f"got {sorted(entry)}"
            )
        try:
            geometry = {k: _from_json(entry[k]) for k in ("stride", "padding", "dilation") if k in entry}
            cases.append(
                custom_case(
                    entry["x"],
                    entry["w"],
                    op=entry.get("op"),
                    groups=entry.get("groups", 1),
                    bias=entry.get("bias", True),
                    direction=entry.get("direction", "forward"),
                    name=entry.get("name"),
                    dtype=dtype,
                    **geometry,
                )
            )
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        except RecursionError:  # a geometry of lists in lists, deeper than the stack
            raise ValueError(f"{where}: stride, padding or dilation is nested too deeply") from None
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"--cases {path}: case names must be unique; got {names}")
    return cases


def _from_json(value: Any) -> Any:
    """JSON lists as the tuples convsuite's geometry arguments take."""
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value
