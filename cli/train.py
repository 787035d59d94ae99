"""``python -m cli train``: train the value-field network and write a checkpoint.

The work is :func:`passage_jax.learned.train.train` and
:func:`passage_jax.learned.train.write_checkpoint`; this command reads the config,
shows progress and prints the held-out metrics.
"""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from passage_jax.fileio import read_document
from passage_jax.learned.train import TrainConfig, train, write_checkpoint


def register(parser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="training config (YAML or JSON)")
    parser.add_argument("--out", type=Path, required=True,
                        help="checkpoint folder (params.msgpack + checkpoint.json), or a .json path "
                             "(its parameters go to <stem>.msgpack beside it)")
    parser.add_argument("--seed", type=int, default=None, help="override the config's seed")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args) -> int:
    console = Console(stderr=True)
    try:
        doc = read_document(args.config, label="train config", yaml_allowed=True)
        config = TrainConfig.from_dict(doc or {})
    except (OSError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        return 2
    tasks: dict = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=console,
                  disable=args.no_progress) as bar:
        def progress(phase, done, total, info):
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total, info="")
            text = ""
            if info.get("success_rate") is not None:
                text = (f"loss {info['loss']:.4f}  success {info['success_rate']:.2f}  "
                        f"regret median {info['regret_median']:.3g}")
            bar.update(tasks[phase], completed=done, **({"info": text} if text else {}))

        result = train(config, seed=args.seed, progress=progress)
    path = write_checkpoint(result, args.out)
    for h in result.history:
        loss = "   -  " if h["loss"] is None else f"{h['loss']:.4f}"
        console.print(f"step {h['step']:>6}  loss {loss}  success {h['success_rate']:.3f}  "
                      f"regret median {h['regret_median']:.4g}  p90 {h['regret_p90']:.4g}")
    console.print(f"data {result.seconds['data']} s, training {result.seconds['train']} s, "
                  f"{result.metrics['param_count']} parameters")
    print(path)
    return 0
