"""``convsuite calibrate``: measure the rule of ``auto`` on this machine, and use it from then on.

``convsuite calibrate --budget-s 60`` times every backend and algorithm on
the part of the crossover grid the current rule is least sure about, for
about a minute, fits the rule on the times and writes this machine's table
beside the tuning cache (``CONVSUITE_CACHE_DIR``): from then on ``auto``
follows it, and ``explain()`` says "measured on this machine by `convsuite
calibrate`". Running it again adds to the table. Exit status: 0 done, 2 a
usage error (reported in one line before anything is measured).
"""

from __future__ import annotations

import argparse
import re
import sys

from convsuite.bench._arguments import positive_float
from convsuite.bench.crossover import thread_list

__all__ = ["add_calibrate_parser", "cmd_calibrate"]


def add_calibrate_parser(sub) -> None:
    """Add the ``calibrate`` sub-command to the ``convsuite`` parser's sub-parsers."""
    calibrate = sub.add_parser(
        "calibrate", help="measure the rule of backend='auto' on this machine within a time budget; used from then on"
    )
    calibrate.add_argument(
        "--budget-s", type=positive_float, default=60.0, help="seconds of measurement, about (default 60)"
    )
    calibrate.add_argument(
        "--device", default="cpu", help="the device whose rule to calibrate: cpu (the GPU's auto has a hand rule)"
    )
    calibrate.add_argument(
        "--threads",
        type=thread_list,
        default=None,
        help="thread counts to measure at, comma-separated (default: the count convsuite uses)",
    )
    calibrate.add_argument("--fresh", action="store_true", help="start a new table instead of adding to this one's")
    calibrate.add_argument("--quiet", action="store_true", help="no line per problem measured")
    calibrate.set_defaults(func=cmd_calibrate)


def _usage_error(message: str) -> int:
    # The library's messages name parameters (`budget_s`); the command line's user typed options.
    message = re.sub(r"`(\w+)`", lambda m: "--" + m.group(1).replace("_", "-"), message)
    print(f"convsuite calibrate: error: {message}", file=sys.stderr)
    return 2


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Calibrate, print what was measured and where the table went."""
    from convsuite._calibrate import calibrate, check_device

    try:
        check_device(args.device)
    except ValueError as exc:
        return _usage_error(str(exc))
    try:
        result = calibrate(
            budget_s=args.budget_s, device=args.device, threads=args.threads, fresh=args.fresh, progress=not args.quiet
        )
    except (TypeError, ValueError) as exc:
        return _usage_error(str(exc))
    except OSError as exc:  # the cache folder cannot be written: found before measuring
        return _usage_error(f"cannot write the calibrated table: {exc} (set CONVSUITE_CACHE_DIR to a writable folder)")
    print(result)
    return 0
