"""``python -m cli trust --score RUN [--score RUN ...] [--oracle RUN] [--holdout RUN
--random-split RUN] [--json]``: the trustworthiness axes of scored runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from cli import inputs
from cli.console import make_console, say, text

__all__ = ["register", "main", "print_table"]

FIELDS = ("regret", "assd", "h95", "success", "obstacle_violation")


def register(p):
    p.add_argument("--score", action="append", default=[], metavar="RUN",
                   help="a scored run folder or seed folder (repeatable): stability, ODD boundary "
                        "and, with --oracle, efficiency")
    p.add_argument("--oracle", default=None, metavar="RUN",
                   help="scored run of the exact oracle on the same device (efficiency axis)")
    p.add_argument("--holdout", default=None, metavar="RUN",
                   help="scored run on the geographic hold-out split (with --random-split)")
    p.add_argument("--random-split", default=None, metavar="RUN",
                   help="scored run of the same planner on the matched-marginal random split")
    p.add_argument("--field", default="regret", choices=FIELDS,
                   help="per-task field of the ODD boundary and geographic axes (default regret)")
    p.add_argument("--top-quantile", type=float, default=0.1,
                   help="share of tasks in each ODD boundary slice (default 0.1)")
    p.add_argument("--json", action="store_true", help="print the table as JSON instead")
    p.add_argument("--output", default=None, help="also write the JSON table to this new file")
    p.add_argument("--force", action="store_true", help="replace an existing --output file")


def check(args) -> None:
    """Before JAX loads: every scored run named exists."""
    for flag, runs in (("--score", args.score), ("--oracle", [args.oracle]),
                       ("--holdout", [args.holdout]), ("--random-split", [args.random_split])):
        for run in runs:
            inputs.require_folder(run, f"{flag} run")


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate.compare import CompareError, load_side  # noqa: PLC0415 (CLI start-up)
    from passage_jax.fileio import atomic_write_json  # noqa: PLC0415 (CLI start-up)
    from passage_jax.trust import TrustError, trust_table  # noqa: PLC0415 (CLI start-up)

    if (args.holdout is None) != (args.random_split is None):
        print("trust: --holdout and --random-split go together", file=sys.stderr)
        return 2
    if not args.score and args.holdout is None:
        print("trust: give --score at least once, or --holdout with --random-split", file=sys.stderr)
        return 2
    if args.output is not None and Path(args.output).is_dir():
        say(f"trust: {args.output} is a folder; --output names the JSON file to write (a folder "
            f"is never replaced, with or without --force)", sys.stderr)
        return 2
    if args.output is not None and Path(args.output).exists() and not args.force:
        say(f"trust: {args.output} exists; choose a new file (or pass --force to replace it)",
            sys.stderr)
        return 2
    try:
        runs = [load_side(p) for p in args.score]
        oracle = None if args.oracle is None else load_side(args.oracle)
        hold = None if args.holdout is None else load_side(args.holdout)
        rand = None if args.random_split is None else load_side(args.random_split)
        table = trust_table(runs, oracle=oracle, holdout=hold, random_split=rand,
                            field_name=args.field, top_quantile=args.top_quantile)
    except (CompareError, TrustError) as e:
        say(f"trust: {e}", sys.stderr)
        return 2
    if args.output is not None:
        atomic_write_json(Path(args.output), table)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print_table(table)
        if args.output is not None:
            say(f"trust table written to {args.output}")
    return 0


def print_table(table: dict) -> None:
    """The trust rows as a table on the console."""
    from rich.table import Table  # noqa: PLC0415 (CLI start-up)

    o = table["options"]
    t = Table(title=text(f"trust axes (field {o['field']}, top quantile {o['top_quantile']:g})"))
    for c in ("run", "axis", "value", "threshold", "fires"):
        t.add_column(c, justify="left" if c in ("run", "axis") else "right", no_wrap=True)
    notes = []
    for r in table["rows"]:
        if r["available"]:
            fires = "FIRES" if r["fires"] else "no"
        else:
            notes.append(f"{r['method_name']} {r['label']}: {r['details'].get('reason')}")
            fires = f"unavailable [{len(notes)}]"
        t.add_row(*map(text, (r["method_name"], r["label"], _num(r["value"]), _num(r["threshold"]),
                              fires)))
    console = make_console()
    console.width = max(console.width, 110)
    console.print(t)
    for i, n in enumerate(notes, 1):
        console.print(text(f"[{i}] {n}"))
