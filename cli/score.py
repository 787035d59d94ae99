"""``python -m cli score --run D``: score a run offline from its persisted routes."""
from __future__ import annotations

import sys


def register(p):
    p.add_argument("--run", required=True,
                   help="run folder (with seed-<seed>/ subfolders) or one seed folder")
    p.add_argument("--force", action="store_true",
                   help="score again a folder that is already scored (outputs are replaced "
                        "atomically)")
    p.add_argument("--dataset-path", default=None,
                   help="dataset root to reload the scenes from when the run's recorded root "
                        "moved (its shard and input hashes must match the run's)")


def hint(e) -> str:
    """The command-line flag that answers a library error, if one does."""
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate import AlreadyScored, DatasetNotFound, ScoreOutdated  # noqa: PLC0415 (CLI start-up)

    if isinstance(e, AlreadyScored):
        return "; pass --force to score it again"
    if isinstance(e, ScoreOutdated):
        return "; score it again with --force"
    if isinstance(e, DatasetNotFound):
        return "; pass --dataset-path to point at a copy"
    return ""


def main(args) -> int:
    from passage_jax.evaluate import ScoreError, print_metrics_table, score_run  # noqa: PLC0415 (CLI start-up)

    try:
        res = score_run(args.run, force=args.force, dataset_path=args.dataset_path,
                        log=lambda m: print(m, file=sys.stderr))
    except ScoreError as e:
        print(f"score: {e}{hint(e)}", file=sys.stderr)
        return 2
    print_metrics_table(res, title=f"score {args.run}")
    return 0
