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
import math
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .._files import read_text
from .._validation import INDEX_LIMIT, _show
from .workloads import Case

__all__ = [
    "MAX_CASES",
    "MAX_CASES_FILE_BYTES",
    "MAX_DEPTH",
    "MAX_NAME_LENGTH",
    "MAX_VALUES",
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

# Bounds on what a cases file (or a sweep) may ask for. A list of layers is a
# few kilobytes; without bounds a 325-byte YAML file of nested aliases ("billion
# laughs") expanded 9x a level into hundreds of megabytes, and an error message
# that echoed it was 17 MB long.

#: Largest cases file read, in bytes.
MAX_CASES_FILE_BYTES = 2**20
#: Most values (lists, objects, numbers, strings) a cases file may describe, aliases expanded.
MAX_VALUES = 500_000
#: Deepest nesting of lists and objects in a cases file ({"cases": [{"padding": [[1, 0], ...]}]} is 5).
MAX_DEPTH = 16
#: Most cases one comparison measures, after --sweep multiplied them.
MAX_CASES = 10_000
#: Longest case name (a label in tables and plots).
MAX_NAME_LENGTH = 200

#: Longest geometry word passed on to the library's own check ('valid', 'same', 'full' and typos of them).
_LONGEST_WORD = 16

#: A whole number as text: ASCII digits only (``int()`` also reads "1_0" as 10 and other scripts' digits).
_DIGITS = re.compile(r"[+-]?[0-9]+")


def parse_shape(text: Any, what: str) -> tuple[int, ...]:
    """A shape from ``"8,64,56,56"`` (or a list of ints); ``what`` names the option."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    elif isinstance(text, str):
        parts = [p.strip() for p in text.replace("x", ",").split(",")]
    else:
        raise ValueError(f"{what} must be a comma-separated list of positive integers; got {_show(text)}")
    if len(parts) > 4:  # refused before converting them: a long list says nothing more
        parts = parts[:5]
    shape = tuple(v for v in (_whole(p) for p in parts) if v is not None)
    if (
        not shape
        or len(shape) != len(parts)
        or any(not 1 <= s < INDEX_LIMIT for s in shape)  # 10**30 overflowed NumPy's shape type
        or len(shape) > 4
    ):
        raise ValueError(
            f"{what} must be 1 to 4 comma-separated positive integers below 2**62, e.g. 8,64,56,56; got {_show(text)}"
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
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        try:
            return int(value)
        except ValueError:  # more digits than Python converts
            return None
    return None


def _int_text(text: str) -> int:
    """A whole number written in ASCII digits; ValueError otherwise."""
    text = text.strip()
    if not _DIGITS.fullmatch(text):
        raise ValueError(text)
    return int(text)


def parse_geometry(text: Any, what: str) -> Any:
    """``stride``/``padding``/``dilation`` from the command line: ``2``, ``2,1``, ``same``, ``1:2,0:1``.

    A word (``same``, ``valid``, ``full``) is passed through; ``lo:hi`` pairs
    are per-side padding. The value is checked by convsuite's own validation
    when the case is built, so the wording of its errors is the library's.
    """
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text.isalpha() and len(text) <= _LONGEST_WORD:
        return text
    try:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) > 3:  # at most two dimensions: no need to read the rest
            raise ValueError(text)
        if any(":" in p for p in parts):
            value = tuple(tuple(_int_text(v) for v in p.split(":")) for p in parts)
        else:
            value = tuple(_int_text(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"{what} must be an integer, integers separated by commas, lo:hi pairs or a word such as same; "
            f"got {_show(text)}"
        ) from None
    return value[0] if len(value) == 1 else value


def _infer_op(w_shape: tuple[int, ...]) -> str:
    """conv1d for (K,) and (M, C, K) weights, conv2d for (KH, KW) and (M, C, KH, KW)."""
    return "conv1d" if len(w_shape) in (1, 3) else "conv2d"


def _short(shape: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in shape)


def _describe(value: Any) -> str:
    """A geometry value as a label shows it, cut to a few dozen characters (a label echoes the user's value)."""
    if isinstance(value, tuple):
        text = ",".join(":".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value[:4])
    else:
        text = value if isinstance(value, str) else _show(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
        Label in the tables, one line of at most :data:`MAX_NAME_LENGTH`
        characters; a description of the shapes by default.
    dtype : str
        The dtype the validation assumes.

    Raises
    ------
    ValueError
        On any invalid value, with one line that names it.
    """
    if name is not None:
        _check_name(name)
    x_shape, w_shape = parse_shape(x, "--x"), parse_shape(w, "--w")
    if op is None:
        op = _infer_op(w_shape)
    if not isinstance(op, str) or op not in ("conv1d", "conv2d"):
        raise ValueError(f"--op must be conv1d or conv2d; got {_show(op)}")
    if not isinstance(direction, str) or direction not in _DIRECTIONS:
        raise ValueError(f"direction must be forward or backward; got {_show(direction)}")
    whole = _whole(groups)
    if whole is None or whole >= INDEX_LIMIT:  # int() truncated 1.5 to 1 and read True as 1
        raise ValueError(f"--groups must be a positive integer below 2**62; got {_show(groups)}")
    groups = whole
    if not isinstance(bias, (bool, np.bool_)):  # bool("false") is True
        raise ValueError(f"bias must be true or false; got {_show(bias)}")
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


def _check_name(name: Any) -> None:
    """A case name: one line of text, at most MAX_NAME_LENGTH characters (a list was an unhashable key)."""
    if not isinstance(name, str):
        raise ValueError(f"`name` must be text (a label for the tables); got {_show(name)}")
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise ValueError(
            f"`name` must be one line of at most {MAX_NAME_LENGTH} printable characters; got {_show(name)}"
        )


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
    """The positive integers of one sweep variable (at most MAX_CASES of them)."""
    texts = values.split(",")
    if len(texts) > MAX_CASES:
        raise ValueError(f"--sweep {var} gives {len(texts)} values; at most {MAX_CASES} cases are measured")
    try:
        parsed = tuple(_int_text(v) for v in texts)
    except ValueError:
        parsed = ()
    if not parsed or any(not 1 <= v < INDEX_LIMIT for v in parsed):
        raise ValueError(f"--sweep {var} must be comma-separated positive integers below 2**62; got {_show(values)}")
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
    total = len(cases) * math.prod(len(values) for values in sweep.values())
    if total > MAX_CASES:  # counted before one is built: a product of long lists never ends
        raise ValueError(
            f"--sweep would make {total:,} cases ({len(cases)} case(s) x "
            f"{' x '.join(f'{len(v)} {var}' for var, v in sweep.items())}); at most {MAX_CASES:,} are measured"
        )
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
    """JSON, or YAML when the file says so and PyYAML is installed; ValueError naming the file otherwise.

    Bounded: at most MAX_CASES_FILE_BYTES are read, and the document may
    hold at most MAX_VALUES values (YAML aliases counted at every place they
    stand, so nested aliases cannot multiply them), at most MAX_CASES_FILE_BYTES
    characters of text (likewise) and MAX_DEPTH levels of nesting.
    """
    label = f"--cases {path}"
    text = read_text(path, label, max_bytes=MAX_CASES_FILE_BYTES)
    try:
        return _parse_structured(path, text, label)
    except RecursionError:  # nesting deeper than the parser's stack: no cases file is like that
        raise ValueError(f"{label}: nested too deeply to be a list of cases") from None


def _parse_structured(path: Path, text: str, label: str) -> Any:
    """The parsed text of ``path``: YAML for .yaml/.yml, else JSON; its size checked before it is used."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return _parse_yaml(text, label)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{label}: not valid JSON ({exc})") from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise ValueError(f"{label}: not valid JSON ({str(exc).splitlines()[0][:100]})") from None
    _check_size(data, label, _json_children, _json_text_length)
    return data


def _parse_yaml(text: str, label: str) -> Any:
    """A YAML document, its node graph measured (aliases expanded) before any Python object is built."""
    try:
        import yaml
    except ImportError:
        raise ValueError(f"{label}: reading YAML needs PyYAML (pip install pyyaml); or use JSON") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        # Merge keys (<<: *a) copy the merged mapping's entries when built: bounded by the expanded count.
        _check_size(node, label, _yaml_children, _yaml_text_length)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ValueError(f"{label}: {_yaml_problem(exc)}") from None
    except ValueError as exc:
        if str(exc).startswith(label):
            raise
        # The constructor's int() past Python's digit limit, say.
        raise ValueError(f"{label}: not valid YAML ({str(exc).splitlines()[0][:100]})") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: Exception) -> str:
    """A YAML error in a few words, with where it is (its first line was only the context)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
    if "nesting depth" in problem:  # libyaml's own limit
        return f"nested too deeply to be a list of cases{where}"
    return f"not valid YAML ({problem[:100]}{where})"


def _json_children(value: Any) -> list:
    if isinstance(value, dict):
        return list(value.values())
    return value if isinstance(value, list) else []


def _json_text_length(value: Any) -> int:
    return len(value) if isinstance(value, str) else 1


def _yaml_children(node: Any) -> list:
    value = node.value
    if isinstance(value, list):  # a sequence's nodes, or a mapping's (key, value) pairs
        return [part for item in value for part in (item if isinstance(item, tuple) else (item,))]
    return []


def _yaml_text_length(node: Any) -> int:
    return len(node.value) if isinstance(node.value, str) else 1


def _check_size(root: Any, label: str, children, text_length) -> None:
    """Refuse a document of more than MAX_VALUES values, MAX_CASES_FILE_BYTES of text or MAX_DEPTH levels.

    Counted as the document reads once built, every alias at every place it
    stands, in time proportional to the distinct nodes (each one's totals are
    kept), without building anything; a node that contains itself is refused.
    """
    count: dict[int, int] = {}
    length: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        kids = children(node)
        if finished:
            open_nodes.discard(key)
            count[key] = 1 + sum(count[id(k)] for k in kids)
            length[key] = text_length(node) + sum(length[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if count[key] > MAX_VALUES:
                raise ValueError(
                    f"{label}: describes more than {MAX_VALUES:,} values (aliases counted where they are used); "
                    "a list of cases is far smaller"
                )
            if length[key] > MAX_CASES_FILE_BYTES:
                raise ValueError(
                    f"{label}: describes more than {MAX_CASES_FILE_BYTES:,} characters of text "
                    "(aliases counted where they are used); a list of cases is far smaller"
                )
            if depth[key] > MAX_DEPTH:
                raise ValueError(f"{label}: nested too deeply (more than {MAX_DEPTH} levels) to be a list of cases")
            continue
        if key in count:
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for kid in kids:
            if id(kid) in open_nodes:
                raise ValueError(f"{label}: an alias refers to a list or object that contains it")
            if id(kid) not in count:
                stack.append((kid, False))


def load_cases_file(path: str | Path, dtype: str = "float32") -> list[Case]:
    """Cases from a JSON (or YAML) file: a list of objects, or ``{"cases": [...]}``.

    Each object has ``x`` and ``w`` (shapes, as lists or ``"8,64,56,56"``)
    and optionally ``name``, ``op``, ``stride``, ``padding``, ``dilation``,
    ``groups``, ``bias`` (true/false) and ``direction`` (forward, backward).
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"--cases {path}: no such file")
    data = _read_structured(path)
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
    if not isinstance(data, list) or not data:
        raise ValueError(f'--cases {path}: expected a non-empty list of cases (or {{"cases": [...]}})')
    if len(data) > MAX_CASES:
        raise ValueError(f"--cases {path}: holds {len(data):,} cases; at most {MAX_CASES:,} are measured")
    cases = []
    for i, entry in enumerate(data):
        where = f"--cases {path}, case {i + 1}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object with x and w; got {_show(entry)}")
        # YAML keys may be numbers, bools or null: compared and shown as text, never sorted with the names.
        unknown = sorted(repr(k) for k in entry if not isinstance(k, str) or k not in _CASE_KEYS)
        missing = [k for k in ("x", "w") if k not in entry]
        if unknown or missing:
            got = f"unknown {_show(', '.join(unknown))}" if unknown else f"no {' or '.join(missing)}"
            raise ValueError(
                f"{where}: keys must include x and w, and may be {', '.join(sorted(_CASE_KEYS - {'x', 'w'}))}; "
                f"got {got}"
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
    twice = [name for name, n in Counter(c.label for c in cases).items() if n > 1]
    if twice:
        raise ValueError(f"--cases {path}: case names must be unique; more than once: {_show(', '.join(twice))}")
    return cases


def _from_json(value: Any) -> Any:
    """JSON lists as the tuples convsuite's geometry arguments take."""
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value
