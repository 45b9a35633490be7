"""``convsuite sweep``: one algorithm's tunable parameters, measured on every layer of a workload.

The FA19 report's section 5.4, generated: every configuration of an
algorithm's :class:`~convsuite.backends.base.Tunable` parameters (or the grid
the user gives) runs on every layer of a workload. Per (layer,
configuration):

- configurations the algorithm refuses on that layer (its ``check`` or its
  ``constraint``) are kept with the reason, shown as ``-``;
- the first call (plan plus first launch, which includes the JIT or NVRTC
  compilation of a configuration not seen before) is timed apart as
  ``compile_s``;
- the output of that call, written into NaN-filled buffers, is checked
  against the float64 reference with the checker ``convsuite compare`` uses
  (:mod:`convsuite.bench.measure`); a configuration that disagrees is
  ``failed`` with its error and never "best";
- then every valid configuration of the layer is timed side by side with the
  measuring core (:func:`convsuite._timing.measure_side_by_side`: warm-up,
  interleaved rounds, medians and spread), on device-resident data with the
  backend's own timer (CUDA events on a GPU).

Without a grid every combination of the tunables' values is swept. A grid
(``--param NAME=V1,V2``) varies only the parameters it names: every other
tunable stays at each layer's hand-chosen value (a rule may choose it per
layer; one that follows a varied parameter is chosen for that value). Each
layer's hand-chosen configuration (``record.defaults``) is always measured,
even when the grid leaves it out, so "best vs default" is always answerable. Nothing here prints or writes files: see
:mod:`convsuite.bench.sweep_output` and the command line.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .._registry import get_backend
from .._timing import Contender, check_settings, measure_side_by_side
from .._validation import _show, positive_int, prepare_forward
from ..backends.base import Algorithm, Backend, Tunable
from .machine import cpu_description, gpu_description, machine_metadata
from .measure import _check_backward, _check_forward, _check_slice
from .timing import SETTLE_S
from .workloads import Case, get_workload

__all__ = [
    "Cell",
    "Layer",
    "Row",
    "SweepResult",
    "algorithm_record",
    "grid_combinations",
    "layer_configurations",
    "parse_grid",
    "parse_param",
    "run_sweep",
    "sample_configurations",
]

#: ``progress(done, total, description)``, called as layers are measured.
Progress = Callable[[int, int, str], None]


@dataclass
class Cell:
    """One configuration on one layer.

    Attributes
    ----------
    status : str
        ``"ok"``, ``"refused"`` (the algorithm declines it here, ``reason``
        says why), ``"failed"`` (it raised, or disagrees with the reference:
        ``reason``) or ``"not swept"`` (outside the grid on this layer).
    median_s, low_s, high_s, iqr_rel, repeats :
        The side-by-side timing (``ok`` only).
    compile_s : float
        Plan plus first launch, seconds (compilation of a new configuration).
    max_rel_error : float
        Largest error relative to the reference's largest magnitude.
    abandoned : bool
        Dropped early (after two rounds) for being far slower than the best.
    """

    status: str
    reason: str = ""
    median_s: float | None = None
    low_s: float | None = None
    high_s: float | None = None
    iqr_rel: float | None = None
    repeats: int = 0
    compile_s: float | None = None
    max_rel_error: float | None = None
    abandoned: bool = False


@dataclass
class Row:
    """One configuration: its parameter values and its cell on every layer."""

    params: dict[str, Any]
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def total_s(self) -> float | None:
        """Sum of the medians over the layers, or None unless every layer ran ``ok``."""
        if not self.cells or any(c.status != "ok" for c in self.cells.values()):
            return None
        return sum(c.median_s for c in self.cells.values())


@dataclass
class Layer:
    """One layer of the workload, with its default and best configuration."""

    label: str
    case: dict
    default: dict[str, Any]
    best: dict[str, Any] | None = None
    default_s: float | None = None
    best_s: float | None = None

    @property
    def speedup(self) -> float | None:
        """Default time over best time (the seed's question), when both ran."""
        if self.default_s is None or self.best_s is None:
            return None
        return self.default_s / self.best_s


@dataclass
class SweepResult:
    """Everything one sweep measured, with its metadata (see :func:`run_sweep`)."""

    backend: str
    algorithm: str
    workload: str
    device: str
    direction: str
    dtype: str
    tunables: list[dict]
    layers: list[Layer]
    rows: list[Row]
    best: dict[str, Any] | None
    best_total_s: float | None
    default_total_s: float | None
    meta: dict

    @property
    def parameter_names(self) -> list[str]:
        """The tunables' names, in declaration order."""
        return [t["name"] for t in self.tunables]

    def row_for(self, params: Mapping[str, Any]) -> Row | None:
        """The row of one configuration, if it was measured."""
        for row in self.rows:
            if row.params == dict(params):
                return row
        return None

    def failures(self) -> list[tuple[dict, str, str]]:
        """``(params, layer, reason)`` of every configuration that failed."""
        return [
            (row.params, label, cell.reason)
            for row in self.rows
            for label, cell in row.cells.items()
            if cell.status == "failed"
        ]

    def as_dict(self) -> dict:
        """Plain data for JSON."""
        return dict(
            backend=self.backend,
            algorithm=self.algorithm,
            workload=self.workload,
            device=self.device,
            direction=self.direction,
            dtype=self.dtype,
            tunables=self.tunables,
            layers=[{**asdict(layer), "speedup": layer.speedup} for layer in self.layers],
            rows=[
                dict(params=row.params, total_s=row.total_s, cells={k: asdict(c) for k, c in row.cells.items()})
                for row in self.rows
            ],
            best=self.best,
            best_total_s=self.best_total_s,
            default_total_s=self.default_total_s,
            meta=self.meta,
        )


# --- parameters -------------------------------------------------------------


def algorithm_record(backend: Backend, algorithm: str) -> Algorithm:
    """The record of ``algorithm``; ValueError naming the choices if there is none."""
    table = backend.algorithm_table()
    if table is None:
        raise ValueError(f"backend {backend.name!r} has no algorithm records, so nothing to sweep")
    if not isinstance(algorithm, str) or algorithm not in table:  # a list would be an unhashable key
        raise ValueError(f"--algorithm must be one of {', '.join(table)} for {backend.name!r}; got {algorithm!r}")
    return table[algorithm]


def _convert(token: str, like: Any) -> Any:
    """``token`` read as the type of the allowed value ``like``; ValueError if it cannot be."""
    if isinstance(like, bool):
        lowered = token.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(token)
    if isinstance(like, (int, np.integer)):
        return int(token)
    if isinstance(like, (float, np.floating)):
        return float(token)
    return token


def parse_param(text: str, record: Algorithm) -> tuple[str, tuple]:
    """``"NAME=v1,v2"`` as ``(name, values)``, each value of its tunable's type.

    Raises
    ------
    ValueError
        Text without ``=``, an unknown name, an empty list, or a value not
        among the tunable's allowed values; the message lists what is accepted.
    """
    known = {t.name: t for t in record.tunables}
    names = ", ".join(known) or "none"
    if "=" not in text:
        raise ValueError(f"--param must be NAME=V1,V2,... with NAME one of {names}; got {text!r}")
    name, _, values_text = text.partition("=")
    name = name.strip()
    if name not in known:
        raise ValueError(f"--param: {record.name!r} has no tunable parameter {name!r} (its parameters: {names})")
    tunable: Tunable = known[name]
    tokens = [v.strip() for v in values_text.split(",") if v.strip()]
    if not tokens:
        raise ValueError(f"--param {name} needs at least one value from {', '.join(map(str, tunable.values))}")
    values = []
    for token in tokens:
        match = None
        for allowed in tunable.values:
            try:
                if _convert(token, allowed) == allowed:
                    match = allowed
                    break
            except ValueError:
                continue
        if match is None:
            raise ValueError(
                f"--param {name} accepts {', '.join(map(str, tunable.values))}; got {token!r} (in {text!r})"
            )
        if match not in values:
            values.append(match)
    return name, tuple(values)


def parse_grid(texts: Sequence[str], record: Algorithm) -> dict[str, tuple]:
    """Every ``--param`` text parsed into a grid; a name given twice is a ValueError."""
    grid: dict[str, tuple] = {}
    for text in texts:
        name, values = parse_param(text, record)
        if name in grid:
            raise ValueError(f"--param {name} is given twice; list all its values in one --param {name}=V1,V2")
        grid[name] = values
    return grid


def grid_combinations(record: Algorithm, grid: Mapping[str, Sequence]) -> list[dict]:
    """Every combination of the values of the parameters ``grid`` names (only those), in declaration order.

    Raises
    ------
    ValueError
        A name that is not a tunable of ``record``, or a value outside its list.
    """
    record.configurations(grid)  # the record's own check of names and values
    axes = [[(t.name, v) for v in grid[t.name]] for t in record.tunables if t.name in grid]
    return [dict(combo) for combo in itertools.product(*axes)]


def layer_configurations(record: Algorithm, spec, direction: str, combos: list[dict]) -> list[dict]:
    """Each combination completed with the layer's hand-chosen values of the parameters it leaves out."""
    return _unique([record.defaults(spec, direction, given=combo) for combo in combos])


def _neighbours(configs: list[dict], centre: Mapping[str, Any]) -> list[int]:
    """Indices of ``configs`` one step from ``centre``: one parameter at the next value below or above it.

    A centre off the grid (a case's own default, e.g. a tile from the hand
    rule) has as neighbours the grid values nearest it on either side.
    """
    names = list(configs[0]) if configs else []
    steps: dict[str, set] = {}
    for name in names:
        values = sorted({c[name] for c in configs}, key=_order)
        here = centre.get(name)
        below = [v for v in values if _order(v) < _order(here)] if here is not None else []
        above = [v for v in values if _order(v) > _order(here)] if here is not None else []
        steps[name] = set(below[-1:] + above[:1])
    found = []
    for i, config in enumerate(configs):
        differ = [n for n in names if config[n] != centre.get(n)]
        if len(differ) == 1 and config[differ[0]] in steps[differ[0]]:
            found.append(i)
    return found


def _order(value: Any) -> tuple:
    """A sort key that orders numbers by value and anything else by its text after them."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def sample_configurations(
    configs: list[dict], limit: int | None, seed: int = 0, centres: Sequence[Mapping[str, Any]] = ()
) -> list[dict]:
    """At most ``limit`` of ``configs`` (deterministic: same seed, same subset), in grid order.

    The pruned sweep asks first whether a nearby value beats the hand-chosen
    default: the neighbours of each ``centres`` entry (each layer's default;
    one parameter one step away) come first, taken in turn from each centre,
    then a random sample of the rest fills the limit.
    """
    if limit is None or len(configs) <= limit:
        return list(configs)
    if limit < 1:
        raise ValueError(f"`max_configs` must be at least 1; got {limit}")
    near = [_neighbours(configs, centre) for centre in centres]
    keep: list[int] = []
    for turn in range(max((len(n) for n in near), default=0)):
        for found in near:
            if turn < len(found) and found[turn] not in keep and len(keep) < limit:
                keep.append(found[turn])
    rest = [i for i in range(len(configs)) if i not in keep]
    keep += random.Random(seed).sample(rest, limit - len(keep))
    return [configs[i] for i in sorted(keep)]


# --- one layer --------------------------------------------------------------


@dataclass
class _Operands:
    """One layer's inputs in canonical layout on the backend's device, and its output buffers."""

    case: Case
    spec: Any
    host: tuple  # user-layout x, w, bias, grad_y (for the reference check)
    device: tuple  # canonical inputs on the device
    outputs: tuple  # buffers on the device


def _operands(case: Case, backend: Backend, dtype: str) -> _Operands:
    """Random inputs of ``case`` (as compare makes them), canonical on the device, and output buffers."""
    x, w, bias, rng = case.arrays(dtype)
    ndim = 1 if case.op == "conv1d" else 2
    call = prepare_forward(case.op, ndim, x, w, bias, case.stride, case.padding, case.dilation, case.groups)
    spec = call.spec
    grad_y = None
    if case.direction == "backward":
        y_user = spec.out_size if len(case.x_shape) == 1 else call.user_shape(spec.y_shape)
        grad_y = rng.standard_normal(y_user).astype(dtype)
    inputs = [call.x, call.w, call.bias]
    if grad_y is not None:
        inputs = [np.ascontiguousarray(grad_y.reshape(spec.y_shape)), call.x, call.w]
    device = tuple(None if a is None else backend.to_device(a) for a in inputs)
    return _Operands(case, spec, (x, w, bias, grad_y), device, _outputs(spec, backend, case.direction))


def _outputs(spec, backend: Backend, direction: str) -> tuple:
    """NaN-filled output buffers on the device, so an element a kernel skips cannot pass the check."""
    xp = backend.array_module()
    shapes = [spec.y_shape] if direction == "forward" else [spec.x_shape, spec.w_shape, (spec.out_channels,)]
    return tuple(xp.full(shape, np.nan, dtype=spec.dtype) for shape in shapes)


def _poison(buffers: tuple) -> None:
    """Refill output buffers with NaN before a checked call."""
    for buffer in buffers:
        buffer.fill(np.nan)


def _check(ops: _Operands, backend: Backend, algorithm: str, params: dict) -> tuple[float, bool]:
    """The maximum relative error of the last call's output and whether it is within tolerance."""
    case = ops.case
    x, w, bias, grad_y = ops.host
    if case.direction == "forward":
        return _check_forward(case, x, w, bias, backend.to_host(ops.outputs[0]))

    def on_slice(sub, xs, gys):
        # The weight gradient sums over the batch: re-run on the check's sub-problem, as compare does.
        small = _operands_from(sub, backend, xs, w, gys)
        backend.plan(small.spec, algorithm, "backward", params)(*small.device, *small.outputs)
        backend.synchronize()
        return tuple(backend.to_host(o) for o in small.outputs)

    sub, xs, gys = _check_slice(case, x, grad_y)
    ndim = 1 if case.op == "conv1d" else 2
    geometry = (sub.stride, sub.padding, sub.dilation, sub.groups)
    sliced = prepare_forward(sub.op, ndim, xs, w, None, *geometry, convert=False).spec
    if algorithm_record(backend, algorithm).can_run(sliced, "backward", params) is not True:
        sub, xs, gys = case, x, grad_y  # this configuration is refused on the slice: check the whole case
    return _check_backward(sub, xs, gys, w, on_slice)


def _operands_from(case: Case, backend: Backend, x, w, grad_y) -> _Operands:
    """Backward operands of ``case`` from given host arrays (the sliced check)."""
    ndim = 1 if case.op == "conv1d" else 2
    call = prepare_forward(case.op, ndim, x, w, None, case.stride, case.padding, case.dilation, case.groups)
    spec = call.spec
    inputs = (np.ascontiguousarray(np.asarray(grad_y, dtype=spec.dtype).reshape(spec.y_shape)), call.x, call.w)
    device = tuple(backend.to_device(a) for a in inputs)
    return _Operands(case, spec, (x, w, None, grad_y), device, _outputs(spec, backend, "backward"))


def _first_call(ops: _Operands, backend: Backend, algorithm: str, params: dict) -> tuple[Cell, Callable | None]:
    """Plan and run one configuration once (timed as compile_s), then check it; the cell and its launch."""
    _poison(ops.outputs)
    backend.synchronize()
    t0 = time.perf_counter()
    try:
        launch = backend.plan(ops.spec, algorithm, ops.case.direction, params)
        launch(*ops.device, *ops.outputs)
        backend.synchronize()
    except Exception as exc:  # a configuration that cannot build or run is a result, not a crash
        return Cell("failed", f"{type(exc).__name__}: {exc}", compile_s=time.perf_counter() - t0), None
    compile_s = time.perf_counter() - t0
    try:
        error, ok = _check(ops, backend, algorithm, params)
    except Exception as exc:
        return Cell("failed", f"check raised {type(exc).__name__}: {exc}", compile_s=compile_s), None
    if not ok:
        reason = f"disagrees with the float64 reference beyond tolerance (max rel. error {error:.3g})"
        return Cell("failed", reason, compile_s=compile_s, max_rel_error=error), None
    return Cell("ok", compile_s=compile_s, max_rel_error=error), launch


def _key(params: Mapping[str, Any]) -> tuple:
    """A hashable key of one configuration."""
    return tuple(sorted(params.items()))


def _sweep_layer(
    case: Case,
    backend: Backend,
    record: Algorithm,
    configs: list[dict],
    dtype: str,
    timing: dict,
) -> tuple[dict, dict[tuple, Cell]]:
    """Every configuration on one layer: the layer's defaults and a cell per configuration."""
    spec = case.spec(dtype)
    direction = case.direction
    defaults = record.defaults(spec, direction)
    # The backend's verdict: it adds its own limits to the record's (e.g. cupy's 32-bit geometry).
    verdicts = {_key(p): backend.can_run(spec, record.name, direction, p) for p in _unique([defaults, *configs])}
    cells: dict[tuple, Cell] = {}
    launches: dict[tuple, Callable] = {}
    runnable = [p for p in _unique([defaults, *configs]) if verdicts[_key(p)] is True]
    ops = _operands(case, backend, dtype) if runnable else None
    for params in _unique([defaults, *configs]):
        key = _key(params)
        if verdicts[key] is not True:
            cells[key] = Cell("refused", str(verdicts[key]))
            continue
        cells[key], launch = _first_call(ops, backend, record.name, params)
        if launch is not None:
            launches[key] = launch
    if launches:
        contenders = {
            repr(key): Contender(lambda launch=launch: launch(*ops.device, *ops.outputs), backend.timer)
            for key, launch in launches.items()
        }
        timings = measure_side_by_side(contenders, **timing)
        for key in launches:
            t = timings[repr(key)]
            cell = cells[key]
            cell.median_s, cell.low_s, cell.high_s = t.median, t.low, t.high
            cell.iqr_rel, cell.repeats, cell.abandoned = t.iqr_rel, t.repeats, t.abandoned
    return defaults, cells


def _unique(configs: list[dict]) -> list[dict]:
    """Configurations with duplicates removed, first occurrence kept."""
    seen, out = set(), []
    for params in configs:
        if _key(params) not in seen:
            seen.add(_key(params))
            out.append(dict(params))
    return out


# --- the sweep --------------------------------------------------------------


def _given_cases(workload: object) -> list[Case]:
    """The cases of a workload given as a sequence; TypeError naming the first item that is not a Case."""
    accepted = "a workload name or a sequence of Case objects (convsuite.bench.workloads.Case)"
    if isinstance(workload, (bytes, Mapping)) or not isinstance(workload, Iterable):
        raise TypeError(f"`workload` must be {accepted}; got {_show(workload)}")
    cases = list(workload)
    for i, case in enumerate(cases):
        if not isinstance(case, Case):
            raise TypeError(f"`workload` must be {accepted}; item {i} is {_show(case)}")
    return cases


def _cases(workload: str | Sequence[Case], device: str, direction: str) -> tuple[str, list[Case]]:
    """The workload's name and its cases in ``direction`` (forward-only layers are run backward if asked)."""
    if isinstance(workload, str):
        name, cases = workload, get_workload(workload, device)
    else:
        cases = _given_cases(workload)
        name = cases[0].workload if cases and len({c.workload for c in cases}) == 1 else "custom"
    if not cases:
        raise ValueError("nothing to sweep: the workload has no cases")
    chosen = [c for c in cases if c.direction == direction]
    if not chosen:
        chosen = [replace(c, direction=direction) for c in cases]
    labels = [c.label for c in chosen]
    if len(set(labels)) != len(labels):
        raise ValueError(f"case names must be unique; got {labels}")
    return name, chosen


def _pick_best(rows: list[Row], label: str) -> Row | None:
    """The fastest row that ran ``ok`` on one layer."""
    ok = [r for r in rows if label in r.cells and r.cells[label].status == "ok"]
    return min(ok, key=lambda r: r.cells[label].median_s) if ok else None


def _layer_defaults(record: Algorithm, cases: Sequence[Case], dtype: str) -> list[dict]:
    """Each layer's hand-chosen parameters (where the algorithm can run it): the centres of a pruned sweep."""
    found = []
    for case in cases:
        spec = case.spec(dtype)
        if record.can_run(spec, case.direction) is True:
            found.append(record.defaults(spec, case.direction))
    return found


def _backend(backend: object) -> Backend:
    """A backend from its name (ValueError listing the names if unknown) or as given; TypeError otherwise."""
    if isinstance(backend, Backend):
        return backend
    if isinstance(backend, str):
        return get_backend(backend)
    raise TypeError(f"`backend` must be a registered backend's name or a Backend instance; got {_show(backend)}")


def _check_grid(grid: object) -> None:
    """None, or a mapping of tunable names to sequences of values (a lone value is not a list of them)."""
    if grid is None:
        return
    if not isinstance(grid, Mapping):
        raise TypeError(f"`grid` must be a mapping of parameter names to sequences of values; got {_show(grid)}")
    for name, values in grid.items():
        # A string is iterable, but as a list of its characters it is never what was meant.
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(
                f"`grid[{name!r}]` must be a sequence of values, e.g. ({values!r},) for that value alone; "
                f"got {_show(values)}"
            )


def _check_sweep_request(grid: object, max_configs: object, settle_s: object, timing: dict) -> None:
    """Refuse a bad grid, sample size or timing setting before any configuration runs."""
    _check_grid(grid)
    if max_configs is not None:
        positive_int(max_configs, "max_configs")
    check_settings(settle_s=0.0 if settle_s is None else settle_s, **timing)


def run_sweep(
    backend: str | Backend,
    algorithm: str,
    workload: str | Sequence[Case],
    *,
    grid: Mapping[str, Sequence] | None = None,
    direction: str = "forward",
    dtype: str = "float32",
    repeat: int = 5,
    rounds: int = 3,
    warmup: int = 1,
    settle_s: float | None = None,
    abandon_ratio: float | None = None,
    max_configs: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> SweepResult:
    """Measure every configuration of ``algorithm``'s tunables on every layer of ``workload``.

    Parameters
    ----------
    backend : str or Backend
        A registered, available backend.
    algorithm : str
        One of the backend's algorithms.
    workload : str or sequence of Case
        A preset of :mod:`convsuite.bench.workloads` (sized for the backend's
        device), or the cases themselves.
    grid : mapping of str to sequence, optional
        Values to try for the tunables it names; every other tunable stays
        at each layer's hand-chosen value. None sweeps every combination of
        every tunable's values. See :func:`parse_grid` for the command line's
        ``--param``.
    direction : {"forward", "backward"}
        The workload's cases in this direction; a forward-only workload is
        run backward when asked.
    dtype : {"float32", "float64"}
    repeat, rounds, warmup :
        Timed calls per configuration, how many interleaved rounds they are
        spread over, untimed calls before each block.
    settle_s : float, optional
        Pause before each block (default: the suite's ``SETTLE_S`` on the
        CPU, none on a GPU).
    abandon_ratio : float, optional
        Stop timing configurations slower than this multiple of the best
        in two rounds (kept and marked); None times all fully.
    max_configs : int, optional
        Keep at most this many grid configurations (with a grid: combinations
        of its values): the neighbours of each layer's default first, then a
        deterministic sample (``seed``) of the rest; each layer's default is
        measured regardless.
    progress : callable, optional
        ``progress(done, total, description)`` per layer.

    Returns
    -------
    SweepResult

    Raises
    ------
    ValueError
        An unknown or unavailable backend, an unknown algorithm, workload,
        direction or dtype, a grid naming an unknown parameter or a
        disallowed value, or a timing setting out of range.
    TypeError
        A ``backend`` that is neither a name nor a Backend, a ``workload``
        sequence holding something other than Case objects, a ``grid`` value
        that is not a sequence, or a timing setting of the wrong type.
    """
    if direction not in ("forward", "backward"):
        raise ValueError(f"--direction must be 'forward' or 'backward'; got {direction!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"--dtype must be 'float32' or 'float64'; got {dtype!r}")
    _check_sweep_request(
        grid, max_configs, settle_s, dict(repeat=repeat, rounds=rounds, warmup=warmup, abandon_ratio=abandon_ratio)
    )
    backend = _backend(backend)
    verdict = backend.available()
    if verdict is not True:
        raise ValueError(f"backend {backend.name!r} is unavailable: {verdict}")
    record = algorithm_record(backend, algorithm)
    workload_name, cases = _cases(workload, backend.device, direction)
    varied = [t.name for t in record.tunables if not grid or t.name in grid]
    if grid:
        centres = [{k: v for k, v in d.items() if k in grid} for d in _layer_defaults(record, cases, dtype)]
        configs = sample_configurations(grid_combinations(record, grid), max_configs, seed, centres)
        in_grid = len(grid_combinations(record, grid))
    else:
        configs = sample_configurations(
            record.configurations(None), max_configs, seed, _layer_defaults(record, cases, dtype)
        )
        in_grid = len(record.configurations(None))
    timing = dict(
        repeat=repeat,
        rounds=rounds,
        warmup=warmup,
        settle_s=(SETTLE_S if backend.device == "cpu" else 0.0) if settle_s is None else settle_s,
        abandon_ratio=abandon_ratio,
    )
    rows: dict[tuple, Row] = {} if grid else {_key(p): Row(dict(p)) for p in configs}
    layers: list[Layer] = []
    started = time.perf_counter()
    modules_before = backend.compiled_modules()
    for i, case in enumerate(cases):
        if progress:
            progress(i, len(cases), case.label)
        here = layer_configurations(record, case.spec(dtype), case.direction, configs) if grid else configs
        defaults, cells = _sweep_layer(case, backend, record, here, dtype, timing)
        layers.append(Layer(case.label, case.as_dict(), defaults))
        for key, cell in cells.items():
            # Parameters in the order the algorithm declares them (tables, CSV columns).
            rows.setdefault(key, Row({t.name: dict(key)[t.name] for t in record.tunables}))
            rows[key].cells[case.label] = cell
    if progress:
        progress(len(cases), len(cases), "done")
    elsewhere = (
        "not this layer's configuration (its unvaried parameters are another layer's hand-chosen values)"
        if grid
        else "outside the grid (another layer's default)"
    )
    for row in rows.values():
        for case in cases:
            row.cells.setdefault(case.label, Cell("not swept", elsewhere))
    row_list = list(rows.values())
    for layer in layers:
        default_cell = rows[_key(layer.default)].cells[layer.label]
        layer.default_s = default_cell.median_s if default_cell.status == "ok" else None
        best = _pick_best(row_list, layer.label)
        if best is not None:
            layer.best, layer.best_s = dict(best.params), best.cells[layer.label].median_s
    complete = [r for r in row_list if r.total_s is not None]
    best_row = min(complete, key=lambda r: r.total_s) if complete else None
    default_total = None
    if all(layer.default_s is not None for layer in layers):
        default_total = sum(layer.default_s for layer in layers)
    where = cpu_description() if backend.device == "cpu" else gpu_description()
    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device_description=where,
        machine=machine_metadata(),
        repeat=repeat,
        rounds=rounds,
        warmup=warmup,
        settle_s=timing["settle_s"],
        abandon_ratio=abandon_ratio,
        grid={k: list(v) for k, v in (grid or {}).items()},
        varied=varied,
        configurations=len(configs),
        configurations_in_grid=in_grid,
        sample_seed=seed if max_configs is not None else None,
        seconds=time.perf_counter() - started,
    )
    built = {k: v for k, v in backend.compiled_modules().items() if k not in modules_before}
    cache = backend.compile_cache()
    if built or cache is not None:
        # Module builds alone (NVRTC, or a load from the disk cache): the
        # compile time the issue asks to see apart from the run time.
        meta.update(modules_built=len(built), module_build_s=sum(built.values()), compile_cache=cache)
    return SweepResult(
        backend=backend.name,
        algorithm=record.name,
        workload=workload_name,
        device=backend.device,
        direction=direction,
        dtype=dtype,
        tunables=[dict(name=t.name, values=list(t.values), doc=t.doc) for t in record.tunables],
        layers=layers,
        rows=row_list,
        best=None if best_row is None else dict(best_row.params),
        best_total_s=None if best_row is None else best_row.total_s,
        default_total_s=default_total,
        meta=meta,
    )
