"""``python -m cli leaderboard INPUT [INPUT ...] --output DIR [--baseline NAME]``: a static,
self-contained page (``DIR/index.html``, with ``DIR/leaderboard.json``) ranking every method
of the given comparison files/folders and scored run folders against one baseline
(``passage_jax.evaluate.leaderboard``)."""
from __future__ import annotations

import sys

from cli import inputs
from cli.console import say


def register(p):
    p.add_argument("inputs", nargs="+", metavar="COMPARE_OR_SCORE",
                   help="comparison JSON files (or folders holding compare.json, e.g. a "
                        "bench --against output) and scored run folders")
    p.add_argument("--output", required=True,
                   help="folder to write index.html and leaderboard.json into")
    p.add_argument("--baseline", default=None, metavar="NAME",
                   help="method_name of the baseline (default: run B of the first comparison "
                        "given, else the first scored run)")
    p.add_argument("--n-bootstrap", "--bootstrap-resamples", dest="n_bootstrap", type=int, default=2000,
                   help="draws of an in-memory comparison, for a method that no given "
                        "comparison pairs with the baseline (default 2000; --bootstrap-resamples is "
                        "the former spelling)")
    p.add_argument("--force", action="store_true",
                   help="replace the leaderboard already in the output folder")


def check(args) -> None:
    """Before JAX loads: every comparison or scored run named exists."""
    for p in args.inputs:
        inputs.require_path(p, "input")


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate.leaderboard import (  # noqa: PLC0415 (CLI start-up)
        LeaderboardError,
        LeaderboardExists,
        write_leaderboard,
    )

    if args.n_bootstrap < 1:
        say(f"leaderboard: --n-bootstrap must be at least 1, got "
            f"{args.n_bootstrap}", sys.stderr)
        return 2
    try:
        out = write_leaderboard(args.inputs, args.output, baseline=args.baseline,
                                force=args.force, n_bootstrap=args.n_bootstrap)
    except LeaderboardError as e:
        flag = " (or pass --force to replace it)" if isinstance(e, LeaderboardExists) else ""
        say(f"leaderboard: {e}{flag}", sys.stderr)
        return 2
    say(out["index"])
    return 0
