"""``convsuite train``: train a network on real data with convsuite's own backward passes.

``convsuite train lenet5 --data digits --backend numba --out DIR`` trains
LeNet-5 on scikit-learn's bundled 8x8 digits (no download), shows a
progress bar with the running loss, prints the test accuracy on the
held-out split and writes ``DIR/train.json`` and the trained weights,
``DIR/lenet5-VARIANT.npz`` (``net.load_state_dict(numpy.load(path))``).

Both files are checked before training and written atomically. Exit status:
0 trained and saved; 1 the training diverged (the loss or a weight stopped
being a finite number: ``train.json`` says ``"status": "diverged"`` and where,
and no weights are written); 2 a usage error (before training), or a file
that could not be written where asked (then it is saved next to it or in the
temporary folder, and one line says where).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

from convsuite._files import atomic_write_bytes, atomic_write_json, check_writable_file
from convsuite.bench._arguments import gpu_unavailable, positive, positive_float

__all__ = ["EXIT_DIVERGED", "EXIT_NOT_SAVED", "add_train_parser", "cmd_train"]

#: Exit status of a run that diverged (its train.json says so; no weights are written).
EXIT_DIVERGED = 1
#: Exit status of a finished run whose files could not go where asked (saved elsewhere, said in one line).
EXIT_NOT_SAVED = 2


def _seed(text: str) -> int:
    """``--seed``: checked here against scikit-learn's bound, not after it fails inside the split."""
    from convsuite.nets.train import SEED_LIMIT

    accepted = "must be an integer in [0, 2**32) (scikit-learn's random_state bound)"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{accepted}; got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"{accepted}; got {text!r}")
    return value


def add_train_parser(sub) -> None:
    """Add the ``train`` sub-command to the ``convsuite`` parser's sub-parsers."""
    from convsuite.nets.lenet import LENET5_VARIANTS
    from convsuite.nets.train import TrainConfig

    defaults = TrainConfig()
    train = sub.add_parser("train", help="train LeNet-5 on scikit-learn's digits with convsuite's backward passes")
    train.add_argument("network", choices=["lenet5"], help="network to train")
    train.add_argument(
        "--data",
        choices=["digits"],
        default="digits",
        help="scikit-learn's 8x8 digits, resized to the network's input (default)",
    )
    train.add_argument(
        "--variant",
        choices=list(LENET5_VARIANTS),
        default=defaults.variant,
        help=f"LeNet-5 variant (default {defaults.variant})",
    )
    train.add_argument("--backend", default=None, help="convolution backend (default: auto)")
    train.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        default=None,
        help="where weights and batches live (default: the backend's device)",
    )
    train.add_argument("--epochs", type=positive, default=defaults.epochs, help=f"(default {defaults.epochs})")
    train.add_argument("--batch", type=positive, default=defaults.batch, help=f"(default {defaults.batch})")
    train.add_argument("--seed", type=_seed, default=defaults.seed, help=f"(default {defaults.seed})")
    # positive_float refuses NaN and inf: either would train to non-finite weights and write a
    # train.json that is not strict JSON ("lr": Infinity).
    train.add_argument(
        "--lr", type=positive_float, default=defaults.lr, help=f"SGD learning rate (default {defaults.lr})"
    )
    train.add_argument(
        "--out", default="train-out", help="folder for train.json, made before training (default train-out)"
    )
    train.set_defaults(func=cmd_train)


def _device_of(backend: str | None) -> str:
    """The device of a named backend (cpu for auto)."""
    if backend is None or backend == "auto":
        return "cpu"
    from convsuite._registry import get_backend

    return get_backend(backend).device


def _out_problem(out: Path) -> str | None:
    """Why the results cannot be written to folder ``out`` (None when they can), checked before
    training so that a bad --out does not throw a finished run away.
    """
    if out.exists() and not out.is_dir():
        return "is an existing file, not a folder"
    try:
        out.mkdir(parents=True, exist_ok=True)  # also fails where a parent is a file
    except OSError as exc:
        return f"cannot be used as the output folder ({exc.strerror or exc})"
    if not os.access(out, os.W_OK | os.X_OK):
        return "is a folder this process cannot write to"
    return None


def _usage_error(message: str) -> int:
    print(f"convsuite train: error: {message}", file=sys.stderr)
    return 2


def cmd_train(args: argparse.Namespace) -> int:
    """Train, print the test accuracy and write ``train.json``."""
    import numpy as np

    import convsuite
    from convsuite import nn
    from convsuite.nets.train import TrainConfig, TrainingDiverged, train_lenet5

    names = [b.name for b in convsuite.list_backends()]
    if args.backend is not None and args.backend not in names + ["auto"]:
        print(
            f"convsuite train: error: --backend must be one of {', '.join(names)} or auto; got {args.backend!r}",
            file=sys.stderr,
        )
        return 2
    if args.backend not in (None, "auto"):
        info = {b.name: b for b in convsuite.list_backends()}[args.backend]
        if not info.available:
            print(f"convsuite train: error: backend {args.backend!r} is unavailable: {info.reason}", file=sys.stderr)
            return 2
    try:
        config = TrainConfig(
            variant=args.variant,
            backend=args.backend,
            epochs=args.epochs,
            batch=args.batch,
            seed=args.seed,
            lr=args.lr,
            device=args.device or _device_of(args.backend),
        )
    except (TypeError, ValueError) as exc:  # the settings' own checks, as a usage error
        return _usage_error(str(exc))
    if config.device == "gpu":
        problem = gpu_unavailable()
        if problem is not None:
            return _usage_error(f"--device gpu cannot run here: {problem}")
    out = Path(args.out)
    problem = _out_problem(out)
    if problem is not None:
        return _usage_error(f"--out {str(out)!r} {problem}")
    # Each file is checked too, so that a folder in the way of one does not throw a finished run away.
    files = {"weights": out / f"lenet5-{config.variant}.npz", "report": out / "train.json"}
    try:
        for path in files.values():
            check_writable_file(path, "--out")
    except ValueError as exc:
        return _usage_error(str(exc))
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]lenet5[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[loss]}"),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        tasks = []  # the bar appears at training's first call, which brings the number of steps

        def progress(step: int, total: int, loss: float | None) -> None:
            text = "loss -" if loss is None else f"loss {loss:.4f}"  # no loss before the first batch ends
            if not tasks:
                description = f"{config.variant} on {config.backend or 'auto'}"
                tasks.append(bar.add_task(description, total=total, completed=step, loss=text))
            else:
                bar.update(tasks[0], completed=step, total=total, loss=text)

        try:
            result = train_lenet5(config, progress=progress)
        except TrainingDiverged as diverged:
            result = diverged
    report = {
        "network": "lenet5",
        "variant": config.variant,
        "data": args.data,
        "backend": config.backend or "auto",
        "device": config.device,
        "epochs": config.epochs,
        "batch": config.batch,
        "seed": config.seed,
        "optimizer": {"name": "SGD", "lr": config.lr, "momentum": config.momentum, "weight_decay": config.weight_decay},
    }
    if isinstance(result, TrainingDiverged):
        # The record says what happened, and no weights are written: they are not numbers any more.
        report.update(
            status="diverged",
            error=str(result),
            diverged_at={"epoch": result.epoch, "step": result.step, "loss": result.loss, "what": result.what},
            test_accuracy_per_epoch=result.test_accuracy_per_epoch,
            loss_per_epoch=result.loss_per_epoch,
        )
        saved = atomic_write_json(files["report"], report, fallback=True)
        print(f"convsuite train: error: {result}", file=sys.stderr)
        print(f"wrote {saved.path} (status: diverged; no weights saved)", file=sys.stderr)
        if saved.warning:
            print(f"convsuite train: warning: {saved.warning}", file=sys.stderr)
        return EXIT_DIVERGED
    print(
        f"test accuracy {result.test_accuracy:.4f} on {result.sizes['test']} held-out digits "
        f"after {config.epochs} epochs ({result.seconds:.1f} s)"
    )
    report.update(
        status="ok",
        train_size=result.sizes["train"],
        test_size=result.sizes["test"],
        test_accuracy=result.test_accuracy,
        test_accuracy_per_epoch=result.test_accuracy_per_epoch,
        loss_per_epoch=result.loss_per_epoch,
        seconds=result.seconds,
        layer_seconds=result.layer_seconds(),
        category_seconds={d: result.layer_times.by_category(d) for d in ("forward", "backward")},
    )
    buffer = io.BytesIO()
    np.savez(buffer, **{k: nn._xp.to_numpy(v) for k, v in result.network.state_dict().items()})
    weights = atomic_write_bytes(files["weights"], buffer.getvalue(), fallback=True)
    report["weights"] = weights.path.name if weights.path.parent == out else str(weights.path)
    saved = atomic_write_json(files["report"], report, fallback=True)
    print(f"wrote {saved.path} and {weights.path} (load with net.load_state_dict(numpy.load(path)))")
    problems = [s.warning for s in (weights, saved) if s.warning]
    for line in problems:
        print(f"convsuite train: warning: {line}", file=sys.stderr)
    return EXIT_NOT_SAVED if problems else 0
