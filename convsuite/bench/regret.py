"""Regret of ``backend="auto"`` on problems the rule was not fitted on.

``python -m convsuite.bench.regret --device cpu`` takes a held-out set
(ECE408 layers, MobileNetV2-1.0 layers, strided, depthwise, pointwise, 1-D
and backward problems, none of them in the crossover grid), and for each
problem:

1. asks the default rule which backend/algorithm it would use (no measuring);
2. tunes it (times every candidate: what autotune would pick);
3. times every candidate again, side by side, as the evaluation.

Regret is the evaluation time of a pick over the fastest candidate's time in
that same evaluation run (1.00 = the pick was the fastest). The old default
(highest priority first) is shown for comparison. Targets: rule <= 1.5x,
autotune <= 1.15x, worst case.

Leave one network out (:func:`leave_one_network_out`): given the measured
times of every candidate on layers labelled by network, the rule is fitted
without network N and judged on N's layers, for each N in turn: how well the
rule transfers to a network it has never seen. ``--measure-networks FILE``
measures the held-out layers once (labelled ece408-fa19, ece408-fa21,
mobilenet_v2, synthetic) and writes them; ``--by-network FILE`` judges the
cases of a file (a list of cases, or a table with ``cases``), optionally
with ``--base TABLE``'s cases (a crossover grid measured on the same
machine) always in the training set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from .. import _registry, _rule, _select, _tuning
from .crossover import DEFAULT_SKIP, Problem, _load, _machine, measure_problem, spec_of

__all__ = ["RULE_TARGET", "TUNED_TARGET", "held_out", "leave_one_network_out", "main", "network_of", "regrets"]

#: Worst-case regret targets of the default rule and of autotune.
RULE_TARGET = 1.5
TUNED_TARGET = 1.15


def held_out(batch: int = 8) -> list[Problem]:
    """The held-out problems (float32); ``batch`` sizes the ECE408 and backward ones."""
    b = batch
    p = [
        Problem("ece408-fa19 conv1", (b, 1, 48, 48), (12, 1, 5, 5)),
        Problem("ece408-fa19 conv2", (b, 12, 22, 22), (24, 12, 5, 5)),
        Problem("ece408-fa21 conv1", (b, 1, 86, 86), (4, 1, 7, 7)),
        Problem("ece408-fa21 conv2", (b, 4, 40, 40), (16, 4, 7, 7)),
        Problem("mnv2 stem 3x3 s2 C3->32 224", (1, 3, 224, 224), (32, 3, 3, 3), stride=2, padding=1),
        Problem("mnv2 1x1 C96->24 56", (1, 96, 56, 56), (24, 96, 1, 1)),
        Problem("mnv2 1x1 C24->144 56", (1, 24, 56, 56), (144, 24, 1, 1)),
        Problem("mnv2 dw 3x3 s2 C144 56", (1, 144, 56, 56), (144, 1, 3, 3), stride=2, padding=1, groups=144),
        Problem("mnv2 1x1 C32->192 28", (1, 32, 28, 28), (192, 32, 1, 1)),
        Problem("mnv2 dw 3x3 C384 14", (1, 384, 14, 14), (384, 1, 3, 3), padding=1, groups=384),
        Problem("mnv2 1x1 C384->96 14", (1, 384, 14, 14), (96, 384, 1, 1)),
        Problem("mnv2 1x1 C576->160 7", (1, 576, 7, 7), (160, 576, 1, 1)),
        Problem("mnv2 dw 3x3 C960 7", (1, 960, 7, 7), (960, 1, 3, 3), padding=1, groups=960),
        Problem("mnv2 classifier 1x1 C1280->1000 1", (1, 1280, 1, 1), (1000, 1280, 1, 1)),
        Problem("strided 5x5 s2 C32->64 33", (4, 32, 33, 33), (64, 32, 5, 5), stride=2, padding=2),
        Problem("strided 3x3 s3 C16->16 40", (2, 16, 40, 40), (16, 16, 3, 3), stride=3),
        Problem("1-D C1 N2e5 k5 same", (200_000,), (5,), padding="same"),
        Problem("1-D C4->4 N2e4 k9", (1, 4, 20_000), (4, 4, 9), padding=4),
        Problem("bwd 3x3 C32->32 28", (4, 32, 28, 28), (32, 32, 3, 3), padding=1, direction="backward"),
        Problem(
            "bwd dw 3x3 s2 C64 28",
            (4, 64, 28, 28),
            (64, 1, 3, 3),
            stride=2,
            padding=1,
            groups=64,
            direction="backward",
        ),
        Problem("bwd 1x1 C64->128 14", (4, 64, 14, 14), (128, 64, 1, 1), direction="backward"),
        Problem("bwd ece408-fa19 conv2", (4, 12, 22, 22), (24, 12, 5, 5), direction="backward"),
    ]
    return p


def network_of(problem: Problem) -> str:
    """The network a held-out problem comes from (its name's prefix), for :func:`leave_one_network_out`."""
    for prefix, network in (("ece408-fa19", "ece408-fa19"), ("ece408-fa21", "ece408-fa21"), ("mnv2", "mobilenet_v2")):
        if problem.name.startswith(prefix) or problem.name.startswith(f"bwd {prefix}"):
            return network
    return problem.extra.get("network", "synthetic")


def _checked_cases(cases, name: str, labelled: bool) -> list[dict]:
    """``cases`` as a list of case dicts with features (and a network label when ``labelled``), or a ValueError."""
    if not isinstance(cases, (list, tuple)):
        raise TypeError(f"`{name}` must be a list of cases (dicts); got {type(cases).__name__}")
    checked = []
    for case in cases:
        if not isinstance(case, dict):
            raise TypeError(f"`{name}` must hold cases (dicts); got {case!r}")
        where = f"case {case.get('name', '?')!r}"
        if labelled and not (isinstance(case.get("network"), str) and case["network"]):
            raise ValueError(
                f"`{name}`: {where} must have `network`, the name of its network; got {case.get('network')!r}"
            )
        if case.get("direction") not in ("forward", "backward"):
            raise ValueError(
                f"`{name}`: {where} must have `direction` 'forward' or 'backward'; got {case.get('direction')!r}"
            )
        checked.append(case)
    _rule.check_cases(checked, None, f"`{name}`")
    widths = {len(c.get("features") or ()) for c in checked}
    if len(widths) > 1 or 0 in widths:
        raise ValueError(f"`{name}`: every case must have `features` of one length; got lengths {sorted(widths)}")
    return checked


def _judge(case: dict, training: list[dict], neighbours: int, thread_weight: float) -> tuple[str, float] | None:
    """The rule's pick for ``case`` fitted on ``training`` and its regret, or None without training data."""
    rows = [row for row in training if row["direction"] == case["direction"]]
    if not rows:
        return None
    labels = list(case["times"])
    ranking = _rule._rank_rows(case["features"], rows, labels, neighbours, thread_weight)
    pick = ranking[0][0]
    return pick, case["times"][pick] / min(case["times"].values())


def _summary(regrets: Sequence[float], names: Sequence[str]) -> dict:
    worst = max(range(len(regrets)), key=lambda i: regrets[i])
    return {
        "layers": len(regrets),
        "geomean": _rule.geomean(regrets),
        "worst": regrets[worst],
        "worst_layer": names[worst],
        "over_1.5": sum(r > RULE_TARGET for r in regrets),
    }


def leave_one_network_out(cases, *, neighbours: int | None = None, base=()) -> dict:
    """Regret of the rule on each network's layers when fitted without that network.

    For each network N among the cases' ``network`` labels, the rule is
    fitted on every other network's cases (plus ``base``, rows that are
    always in the training set, e.g. a crossover grid measured on the same
    machine) and picks a candidate for each of N's layers; the regret is the
    measured time of the pick over the layer's fastest measured time.

    Parameters
    ----------
    cases : list of dict
        Each with ``network`` (str), ``direction``, ``features``
        (:func:`convsuite._rule.features`, or any point of one length) and
        ``times`` (label -> seconds > 0, every candidate measured); ``name`` is shown.
    neighbours : int, optional
        Voting neighbours. Default: fitted on each fold's training cases, with the
        thread weight (:func:`convsuite._rule.fit`); given, the thread weight is 1.
    base : list of dict, optional
        Cases always trained on, never judged (no ``network`` needed).

    Returns
    -------
    dict
        ``networks``: per network ``layers``, ``geomean``, ``worst``,
        ``worst_layer``, ``over_1.5``, ``regrets`` (layer name, pick, regret);
        ``overall``: the same over every judged layer; ``unjudged``: layers of
        a direction no other network (nor ``base``) has.

    Raises
    ------
    TypeError, ValueError
        Cases without a network label, direction, features or valid times;
        fewer than two networks; ``neighbours`` not an int >= 1.
    """
    cases = _checked_cases(cases, "cases", labelled=True)
    base = _checked_cases(list(base), "base", labelled=False) if len(base) else []
    if base and len(base[0]["features"]) != len(cases[0]["features"]):
        raise ValueError("`base` cases must have features of the same length as `cases`")
    if neighbours is not None and (isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 1):
        raise ValueError(f"`neighbours` must be an int >= 1 or None (fitted); got {neighbours!r}")
    networks = list(dict.fromkeys(case["network"] for case in cases))
    if len(networks) < 2:
        raise ValueError(f"`cases` must hold layers of at least two networks to leave one out; got {networks}")
    per_network, every, names, unjudged = {}, [], [], []
    for network in networks:
        training = base + [case for case in cases if case["network"] != network]
        if neighbours is None:
            settings = _rule.fit(training)
            k, weight = settings["neighbours"], settings["thread_weight"]
        else:
            k, weight = neighbours, 1.0
        judged = []
        for case in (c for c in cases if c["network"] == network):
            outcome = _judge(case, training, k, weight)
            if outcome is None:
                unjudged.append(case.get("name", "?"))
                continue
            judged.append((case.get("name", "?"), *outcome))
        if not judged:
            continue
        regrets = [r for _, _, r in judged]
        per_network[network] = _summary(regrets, [n for n, _, _ in judged]) | {"regrets": judged}
        every += regrets
        names += [f"{network}: {n}" for n, _, _ in judged]
    overall = _summary(every, names) if every else {}
    return {"networks": per_network, "overall": overall, "unjudged": unjudged}


def network_markdown(result: dict, machine: str, date: str, source: str) -> str:
    """The leave-one-network-out regrets as a markdown table."""
    lines = [
        "# Regret of the rule on networks it was not fitted on",
        "",
        f"Cases {source}; judged {date} on {machine}. For each network, the rule is fitted on the other "
        "networks' layers and picks for this network's layers; regret = time of the pick / fastest time.",
        "",
        "| network | layers | geometric mean | worst | worst layer | over 1.5x |",
        "|---|---|---|---|---|---|",
    ]
    rows = list(result["networks"].items()) + ([("all", result["overall"])] if result["overall"] else [])
    for network, s in rows:
        lines.append(
            f"| {network} | {s['layers']} | {s['geomean']:.2f} | {s['worst']:.2f} | {s['worst_layer']} | "
            f"{s['over_1.5']} |"
        )
    if result["unjudged"]:
        lines += ["", f"Not judged (no other network has a layer of their direction): {', '.join(result['unjudged'])}"]
    return "\n".join(lines) + "\n"


def measure_network_cases(
    problems: Sequence[Problem], device: str, skip: Sequence[str], progress: bool = True
) -> list[dict]:
    """Every candidate's time on each problem, once, as cases labelled by network (:func:`network_of`)."""
    threads = _tuning.get_num_threads()
    cases = []
    for i, problem in enumerate(problems, 1):
        times = measure_problem(problem, device, skip)
        if not times:
            continue
        spec = spec_of(problem)
        cases.append(
            {
                "name": problem.name,
                "network": network_of(problem),
                "direction": problem.direction,
                "threads": threads,
                "features": list(_rule.features(spec, threads)),
                "times": times,
            }
        )
        if progress:
            print(f"[{i}/{len(problems)}] {problem.name}: {min(times, key=times.get)}", file=sys.stderr)
    return cases


def _read_cases(path: Path, what: str) -> list:
    """The cases of a JSON file: a list of cases, or a table's ``cases``; ValueError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path} could not be read: {exc}") from None
    cases = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(cases, list):
        raise ValueError(f"{what} {path} holds no list of cases")
    return cases


def _rule_pick(problem: Problem, device: str) -> tuple[str, str, str]:
    """What auto picks by the rule, without measuring: the label, how it decided, and why."""
    spec = spec_of(problem)
    # The data's home decides the device auto chooses on: None (NumPy) is the CPU; on the GPU, the
    # device backend that would own the user's arrays (as cs.conv2d on CuPy arrays).
    home = None if device == "cpu" else _device_backend(device)
    with _tuning.use_autotune(False):
        backend, algorithm, decision = _select.choose(spec, problem.direction, "auto", "regret", "auto", home)
    return f"{backend.name}/{algorithm}", decision.decided_by, decision.reason


def _device_backend(device: str):
    """The highest-priority available backend of ``device`` (the owner of arrays there)."""
    for info in _registry.list_backends():
        if info.device == device and info.available:
            return _registry.get_backend(info.name)
    raise ValueError(f"no available backend on device {device!r}")


def _priority_pick(problem: Problem, device: str) -> str:
    """What the highest-priority backend that can run it would use (the pre-rule default)."""
    spec = spec_of(problem)
    pairs, _ = _registry.candidates(spec, "auto", problem.direction, device)
    first = pairs[0][0]
    return f"{first.name}/{first.choose_algorithm(spec, problem.direction)[0]}"


def regrets(problems: Sequence[Problem], device: str, skip: Sequence[str], progress: bool = True) -> list[dict]:
    """Rule, autotune and priority regret of each problem, from two side-by-side measurements."""
    rows = []
    for i, problem in enumerate(problems, 1):
        rule, decided_by, reason = _rule_pick(problem, device)
        priority = _priority_pick(problem, device)
        tuned_times = measure_problem(problem, device, skip)
        tuned = next(iter(tuned_times))  # the tuner's own pick (its ranking, ties included), not just the min
        times = measure_problem(problem, device, skip)
        best = min(times.values())
        row = {
            "name": problem.name,
            "direction": problem.direction,
            "best": min(times, key=times.get),
            "best_s": best,
            "rule": rule,
            "rule_regret": times.get(rule, float("nan")) / best,
            "decided_by": decided_by,
            "rule_reason": reason,
            "tuned": tuned,
            "tuned_regret": times[tuned] / best,
            "priority": priority,
            "priority_regret": times.get(priority, float("nan")) / best,
        }
        rows.append(row)
        if progress:
            print(
                f"[{i}/{len(problems)}] {problem.name}: rule {rule} x{row['rule_regret']:.2f}, "
                f"tuned x{row['tuned_regret']:.2f}, priority x{row['priority_regret']:.2f}",
                file=sys.stderr,
            )
    return rows


def _markdown(device: str, rows: list[dict], machine: str, date: str) -> str:
    lines = [
        f"# Regret of auto on held-out problems ({device})",
        "",
        f"Measured {date} on {machine}, float32, by `python -m convsuite.bench.regret --device {device}`. "
        "Regret = time of the pick / time of the fastest candidate, both from the same side-by-side "
        "evaluation run (the tuned pick comes from a separate, earlier measurement). The machine is shared "
        "and noisy; re-run at a quiet moment for final figures.",
        "",
        "| problem | dir | fastest (us) | rule pick | rule | autotune pick | autotune | old priority pick | priority |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['direction'][:3]} | {r['best']} ({r['best_s'] * 1e6:.0f}) | {r['rule']} | "
            f"{r['rule_regret']:.2f} | {r['tuned']} | {r['tuned_regret']:.2f} | {r['priority']} | "
            f"{r['priority_regret']:.2f} |"
        )
    for key, label in (("rule_regret", "rule"), ("tuned_regret", "autotune"), ("priority_regret", "old priority")):
        values = [r[key] for r in rows]
        lines.append("")
        lines.append(
            f"- {label}: worst x{max(values):.2f}, median x{statistics.median(values):.2f}, "
            f"mean x{statistics.fmean(values):.2f}"
        )
    misses = [r for r in rows if r["rule_regret"] > RULE_TARGET or r["tuned_regret"] > TUNED_TARGET]
    if misses:
        lines += [
            "",
            f"Over target (rule > {RULE_TARGET}x or autotune > {TUNED_TARGET}x), with the rule's reason "
            "(the measured problems that voted):",
            "",
        ]
        lines += [
            f"- {r['name']} ({r['direction']}): rule x{r['rule_regret']:.2f}, autotune x{r['tuned_regret']:.2f}; "
            f"{r.get('rule_reason', '')}"
            for r in misses
        ]
    return "\n".join(lines) + "\n"


def _by_network(args, parser, skip) -> int:
    """``--measure-networks`` / ``--by-network``: leave-one-network-out regret, printed and written."""
    if args.measure_networks:
        cases = measure_network_cases(held_out(args.batch), args.device, skip)
        date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        record = {"kind": "network cases", "device": args.device, "host": _machine(args.device), "date": date}
        _rule.write_table(args.measure_networks, record | {"cases": cases})
        source = f"measured now ({args.measure_networks})"
    else:
        try:
            cases = _read_cases(args.by_network, "--by-network")
        except ValueError as exc:
            parser.error(str(exc))
        source = f"from {args.by_network}"
    base = []
    if args.base:
        try:
            base = _read_cases(args.base, "--base")
        except ValueError as exc:
            parser.error(str(exc))
        source += f", with the cases of {args.base} always trained on"
    try:
        result = leave_one_network_out(cases, neighbours=args.neighbours, base=base)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = network_markdown(result, _machine(args.device), date, source)
    print(text)
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        (Path(args.docs) / f"regret-by-network-{args.device}.md").write_text(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Print (and write to docs/measurements/) the regret table of one device."""
    from ._arguments import backend_names, folder_or_nowhere, out_file, positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.regret", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument(
        "--skip",
        type=backend_names(allow_empty=True),
        default=list(DEFAULT_SKIP),
        help="backends to leave out (comma-separated)",
    )
    parser.add_argument("--batch", type=positive, default=8, help="batch of the ECE408 problems")
    parser.add_argument(
        "--docs", type=folder_or_nowhere, default="docs/measurements", help="where the table goes ('' for nowhere)"
    )
    networks = parser.add_mutually_exclusive_group()
    networks.add_argument(
        "--by-network",
        metavar="FILE",
        type=Path,
        default=None,
        help="leave one network out on the measured cases of FILE (a JSON list of cases, or a table with cases)",
    )
    networks.add_argument(
        "--measure-networks",
        metavar="FILE",
        type=out_file,
        default=None,
        help="measure every candidate on the held-out layers once, write them to FILE, leave one network out",
    )
    parser.add_argument(
        "--base", metavar="TABLE", type=Path, default=None, help="with --by-network: cases always trained on"
    )
    parser.add_argument(
        "--neighbours", type=positive, default=None, help="with --by-network: voting neighbours (default: fitted)"
    )
    args = parser.parse_args(argv)
    skip = tuple(args.skip)
    if args.by_network or args.measure_networks:
        return _by_network(args, parser, skip)
    if args.base or args.neighbours:
        parser.error("--base and --neighbours go with --by-network or --measure-networks")
    load_before = _load()
    rows = regrets(held_out(args.batch), args.device, skip)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = _markdown(args.device, rows, _machine(args.device, load_before), date)
    print(text)
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        (Path(args.docs) / f"regret-{args.device}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
