"""The problems the CPU rule is measured on: :class:`Problem` and the fitting grid.

Shared by the crossover map (``python -m convsuite.bench.crossover``), which
measures the whole grid on a quiet machine for the shipped tables, and by
:func:`convsuite.calibrate`, which measures the part of it the rule is least
sure about on the user's machine. A problem is a shape and a geometry, never
an array: :func:`spec_of` validates it without allocating its operands.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ._spec import ConvSpec
from ._validation import int_at_least, prepare_forward

__all__ = ["MAX_MACS", "Problem", "fit_grid", "round_robin", "spec_of"]

#: Largest forward work (multiply-adds) of a grid problem: keeps one sweep to minutes on 2 cores.
MAX_MACS = 150_000_000

DIRECTIONS = ("forward", "backward")
#: The :func:`fit_grid` parameters of each family's forward and backward quota (for error messages).
_NAMES = {
    "dense": {"forward": "forward", "backward": "backward"},
    "depthwise": {"forward": "depthwise_forward", "backward": "depthwise_backward"},
    "first": {"forward": "first_forward", "backward": "first_backward"},
}


@dataclass(frozen=True)
class Problem:
    """One convolution problem of a grid or a held-out set."""

    name: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: int = 1
    padding: object = 0
    groups: int = 1
    direction: str = "forward"
    dtype: str = "float32"
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        # Checked here: an unknown direction has no candidates, so measuring it returned {} without a word.
        if self.direction not in DIRECTIONS:
            raise ValueError(f"`direction` must be 'forward' or 'backward'; got {self.direction!r}")

    @property
    def ndim(self) -> int:
        """Spatial dimensions (1 or 2); a plain kernel ``(K,)``/``(KH, KW)`` has no channel axes."""
        rank = len(self.w_shape)
        return rank - 2 if rank > 2 else rank


def spec_of(problem: Problem) -> ConvSpec:
    """The validated spec of a problem, without allocating its operands.

    Raises
    ------
    ValueError
        A weight shape of another rank than 1 to 4, or a geometry the
        convolution refuses.
    """
    if len(problem.w_shape) not in (1, 2, 3, 4):
        raise ValueError(
            "`w_shape` must be (K,), (KH, KW), (M, C/groups, K) or (M, C/groups, KH, KW); "
            f"got {tuple(problem.w_shape)!r} in problem {problem.name!r}"
        )
    dtype = np.dtype(problem.dtype)

    def stand_in(shape: tuple[int, ...]) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))

    op = f"conv{problem.ndim}d"
    return prepare_forward(
        op,
        problem.ndim,
        stand_in(problem.x_shape),
        stand_in(problem.w_shape),
        None,
        problem.stride,
        problem.padding,
        1,
        problem.groups,
        convert=False,
    ).spec


def _problem_2d(
    batch: int, channels: int, out_channels: int, size: int, kernel: int, stride: int, depthwise: bool, direction: str
) -> Problem | None:
    """One 2-D grid problem (padding ``kernel // 2``), or None where it is invalid or over :data:`MAX_MACS`."""
    if depthwise:
        if channels == 1:
            return None
        out_channels, groups = channels, channels
    else:
        groups = 1
    if kernel > size:
        return None
    problem = Problem(
        name=f"B{batch} C{channels} M{out_channels} {size}x{size} k{kernel} s{stride}" + (" dw" if depthwise else ""),
        x_shape=(batch, channels, size, size),
        w_shape=(out_channels, channels // groups, kernel, kernel),
        stride=stride,
        padding=kernel // 2,
        groups=groups,
        direction=direction,
    )
    return problem if spec_of(problem).macs <= MAX_MACS else None


def _sample(
    rng: random.Random, axes: list[tuple], quota: dict[str, int], depthwise: bool, seen: set, names: dict[str, str]
) -> list[Problem]:
    """Draw problems from the shuffled ``axes`` until each direction's quota is filled.

    ``names`` gives each direction's parameter of :func:`fit_grid`: a quota
    the axes cannot fill is a ValueError naming it (a grid silently smaller
    than asked for would be fitted as if it were whole).
    """
    asked = dict(quota)
    rng.shuffle(axes)
    problems = []
    for batch, channels, out_channels, size, kernel, stride in axes:
        direction = "forward" if quota["forward"] else "backward"
        if not quota[direction]:
            break
        problem = _problem_2d(batch, channels, out_channels, size, kernel, stride, depthwise, direction)
        if problem is None or (key := (problem.x_shape, problem.w_shape, stride, direction)) in seen:
            continue
        seen.add(key)
        quota[direction] -= 1
        problems.append(problem)
    short = [direction for direction in quota if quota[direction]]
    if short:
        wanted = " + ".join(f"{names[d]}={asked[d]}" for d in asked)
        raise ValueError(
            f"`{names[short[0]]}` asks for more problems than its axes hold: {wanted} asked, "
            f"{len(problems)} distinct valid problems found; ask for fewer"
        )
    return problems


def fit_grid(
    seed: int = 0,
    forward: int = 52,
    backward: int = 36,
    depthwise_forward: int = 22,
    depthwise_backward: int = 6,
    first_forward: int = 12,
    first_backward: int = 4,
) -> list[Problem]:
    """The fitting grid: fixed random samples of the axes below, a deep-end block, and 1-D problems.

    How it covers the class the rule is judged on (the held-out set of
    :mod:`convsuite.bench.regret`: ECE408, MobileNetV2, strided, depthwise,
    pointwise and backward layers), without containing any of its problems:

    - dense problems (``forward`` + ``backward``) sample batch 1/4/16,
      channels 1..1024, output channels 8..1024, sizes 1..56 (1 and 7 are the
      pixel counts at the end of a classification network), kernels 1/3/5 and
      strides 1/2;
    - depthwise problems are sampled on their own (``depthwise_forward`` +
      ``depthwise_backward``), so they are not a thin share of the dense
      product: channels 8..1024, sizes 4..112, kernels 3/5, strides 1/2;
    - first layers are sampled on their own too (``first_forward`` +
      ``first_backward``): 1..16 input channels, 4..32 output channels, 32..96
      pixels a side, kernels 3/5/7 (ECE408's layers and a network's stem);
    - a fixed block of 1x1 problems at batch 1 with 256..1024 channels on 1x1
      and 7x7 pixels (a classifier and the last stages), where BLAS call
      overhead, not arithmetic, decides the winner;
    - 1-D problems of 1 and 8 channels, 10^3 and 10^5 samples.

    The channel counts of the grid (powers of two and 96) differ from the
    held-out ones (12, 24, 144, 160, 192, 384, 576, 960, 1280, ...), and
    ``tests/test_selection_tools.py`` checks that no grid problem equals a
    held-out one.

    Raises
    ------
    TypeError, ValueError
        A count that is not an int >= 0, or more problems than a family's
        axes hold (its forward and backward problems are distinct).
    """
    counts = dict(
        forward=forward,
        backward=backward,
        depthwise_forward=depthwise_forward,
        depthwise_backward=depthwise_backward,
        first_forward=first_forward,
        first_backward=first_backward,
    )
    for name, value in counts.items():  # a negative quota is never used up: the sampler took every problem
        int_at_least(value, name, 0)
    rng = random.Random(seed)
    seen: set = set()
    dense = [
        (batch, channels, out_channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (1, 8, 32, 96, 256, 1024)
        for out_channels in (8, 32, 96, 256, 1024)
        for size in (1, 4, 7, 12, 28, 56)
        for kernel in (1, 3, 5)
        for stride in (1, 2)
    ]
    families = {"dense": _sample(rng, dense, {"forward": forward, "backward": backward}, False, seen, _NAMES["dense"])}
    depthwise = [
        (batch, channels, channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (8, 32, 96, 256, 512, 1024)
        for size in (4, 7, 14, 28, 56, 112)
        for kernel in (3, 5)
        for stride in (1, 2)
    ]
    quota = {"forward": depthwise_forward, "backward": depthwise_backward}
    families["depthwise"] = _sample(rng, depthwise, quota, True, seen, _NAMES["depthwise"])
    first = [
        (batch, channels, out_channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (1, 4, 16)
        for out_channels in (4, 8, 32)
        for size in (32, 64, 96)
        for kernel in (3, 5, 7)
        for stride in (1, 2)
    ]
    quota = {"forward": first_forward, "backward": first_backward}
    families["first"] = _sample(rng, first, quota, False, seen, _NAMES["first"])
    families["pointwise"], families["1-D"] = [], []
    for size in (1, 7):
        for channels in (256, 512, 1024):
            for out_channels in (256, 512, 1024):
                problem = _problem_2d(1, channels, out_channels, size, 1, 1, False, "forward")
                if problem is None:  # over MAX_MACS, as _sample skips it
                    continue
                key = (problem.x_shape, problem.w_shape, 1, "forward")
                if key not in seen:
                    seen.add(key)
                    families["pointwise"].append(problem)
    for length in (1_000, 100_000):
        for kernel in (3, 7, 31):
            for channels in (1, 8):
                problem = Problem(
                    name=f"1-D B1 C{channels} M{channels} N{length} k{kernel}",
                    x_shape=(1, channels, length),
                    w_shape=(channels, channels, kernel),
                    padding="same",
                )
                if spec_of(problem).macs <= MAX_MACS:
                    families["1-D"].append(problem)
    problems = []
    for family, members in families.items():
        for problem in members:
            problem.extra["family"] = family
        problems += members
    return problems


def round_robin(problems: list[Problem]) -> list[Problem]:
    """``problems`` taking one of each family in turn (dense, depthwise, ...): a run cut short by its
    time budget then covers every family instead of the first ones only.
    """
    families: dict[str, list[Problem]] = {}
    for problem in problems:
        families.setdefault(problem.extra.get("family", ""), []).append(problem)
    queues = [iter(members) for members in families.values()]
    ordered = []
    while queues:
        for queue in list(queues):
            member = next(queue, None)
            if member is None:
                queues.remove(queue)
            else:
                ordered.append(member)
    return ordered
