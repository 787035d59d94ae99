"""``python -m cli train``: train the value-field network and write a checkpoint.

The work is :func:`passage_jax.learned.train.train` and
:func:`passage_jax.learned.train.write_checkpoint`; this command reads the config,
checks the output target before any training (an existing checkpoint is replaced
only with ``--force``; the package's shipped checkpoint folder never), shows
progress and prints the held-out metrics.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.console import say
from cli.inputs import require_file
from passage_jax.fileio import read_document


def register(parser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="training config (YAML or JSON)")
    parser.add_argument("--out", type=Path, required=True,
                        help="checkpoint folder (params.msgpack + checkpoint.json), or a .json path "
                             "(its parameters go to <stem>.msgpack beside it)")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed (>= 0)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing checkpoint at --out (never one of the package's "
                             "shipped checkpoints)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def check(args) -> None:
    """Before JAX loads: the config file exists."""
    require_file(args.config, "train config")


def train(config, progress=None):
    """:func:`passage_jax.learned.train.train` (the library, and JAX, load when the command
    runs)."""
    from passage_jax.learned.train import train as run  # noqa: PLC0415 (CLI start-up)

    return run(config, progress=progress)


def _config(args):
    """The config file's :class:`~passage_jax.learned.train.TrainConfig` (read bounded: at
    most :data:`~passage_jax.learned.train.CONFIG_MAX_BYTES`, no YAML aliases), with
    ``--seed`` applied; an empty document means every default."""
    from passage_jax.learned.train import CONFIG_MAX_BYTES, TrainConfig  # noqa: PLC0415 (CLI start-up)

    doc = read_document(args.config, label="train config", yaml_allowed=True,
                        max_bytes=CONFIG_MAX_BYTES)
    config = TrainConfig.from_dict({} if doc is None else doc, source=args.config)
    if args.seed is not None:
        try:
            config = dataclasses.replace(config, seed=args.seed)
        except ValueError as e:
            raise ValueError(f"--seed {args.seed}: {e}") from None
    return config


def _progress_bar(console, disable: bool):
    """A rich progress display and the ``progress`` callback :func:`train` takes."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=console,
                   disable=disable)
    tasks: dict = {}

    def progress(phase, done, total, info):
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total, info="")
        text = ""
        if info.get("success_rate") is not None:
            text = (f"loss {info['loss']:.4f}  success {info['success_rate']:.2f}  "
                    f"regret median {info['regret_median']:.3g}")
        bar.update(tasks[phase], completed=done, **({"info": text} if text else {}))

    return bar, progress


def main(args) -> int:
    from passage_jax.learned.checkpoint import check_checkpoint_target  # noqa: PLC0415 (CLI start-up)
    from passage_jax.learned.train import init_checkpoint, write_checkpoint  # noqa: PLC0415 (CLI start-up)

    console = Console(stderr=True)
    try:
        config = _config(args)
        check_checkpoint_target(args.out, overwrite=args.force)
        init_checkpoint(config)  # a bad 'init' is refused before any material is made
    except (OSError, ValueError) as e:
        say(f"train: {e}", sys.stderr)
        return 2
    bar, progress = _progress_bar(console, args.no_progress)
    with bar:
        result = train(config, progress=progress)
    path = write_checkpoint(result, args.out, overwrite=args.force)
    for h in result.history:
        loss = "   -  " if h["loss"] is None else f"{h['loss']:.4f}"
        console.print(f"step {h['step']:>6}  loss {loss}  success {h['success_rate']:.3f}  "
                      f"regret median {h['regret_median']:.4g}  p90 {h['regret_p90']:.4g}")
    console.print(f"data {result.seconds['data']} s, training {result.seconds['train']} s, "
                  f"{result.metrics['param_count']} parameters")
    say(path)
    return 0
