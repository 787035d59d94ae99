"""``python -m cli score --run D``: score a run offline from its persisted routes."""
from __future__ import annotations

import sys

from cli import inputs, launch


def register(p):
    p.add_argument("--run", required=True,
                   help="finished run folder (the seeds its run.json declares are scored) or one "
                        "seed folder")
    p.add_argument("--force", action="store_true",
                   help="score again a folder that is already scored (outputs are replaced "
                        "atomically)")
    p.add_argument("--dataset-path", default=None,
                   help="dataset root to reload the scenes from when the run's recorded root "
                        "moved (its shard and input hashes must match the run's); \"shipped\" "
                        "names the cohort shipped in the package")
    p.add_argument("--chunk", type=launch.positive_int, default=None, metavar="K",
                   help="scenes read and scored together (default: a budget of grid cells, 1,024 "
                        "scenes at 64x64, 64 at 256x256); a multi-process launch shares out whole "
                        "chunks")
    p.add_argument("--hash-inputs", action="store_true",
                   help="compute every reloaded task's input hash and compare it with the run's, "
                        "even where the run was admitted by this evaluator (by default the shards' "
                        "sha256 and the run's provenance vouch for them; the receipt's "
                        "input_check says which check was made)")
    launch.add_flags(p)


def check(args) -> None:
    """Before JAX loads: the run folder and a ``--dataset-path`` folder exist."""
    inputs.require_folder(args.run, "run folder")
    inputs.require_dataset(args.dataset_path)


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
    from cli.console import print_metrics_table, say  # noqa: PLC0415 (CLI start-up)
    from passage_jax import cluster  # noqa: PLC0415 (CLI start-up)
    from passage_jax.evaluate import ScoreError, score_run  # noqa: PLC0415 (CLI start-up)

    code = launch.join(args, "score")
    if code is not None:
        return code
    writer = cluster.is_writer()
    try:
        res = score_run(args.run, force=args.force, dataset_path=args.dataset_path,
                        log=(lambda m: say(m, sys.stderr)) if writer else None,
                        chunk=args.chunk, check="hash" if args.hash_inputs else None)
    except ScoreError as e:
        say(f"score: {e}{hint(e)}", sys.stderr)
        return 2
    except cluster.ClusterError as e:
        return launch.fail("score", e)
    if not writer:
        say(f"score: process {cluster.process_index()} of {cluster.process_count()}: shares "
            f"delivered; process 0 wrote the files", sys.stderr)
        return 0
    print_metrics_table(res, title=f"score {args.run}", folders=seed_folders_of(args.run, res))
    return 0


def seed_folders_of(run, res: dict) -> dict:
    """Each scored seed's folder by its name in ``res``: ``run`` itself when it is a seed
    folder, else ``run/<name>``."""
    from pathlib import Path  # noqa: PLC0415 (CLI start-up)

    from passage_jax.protocol.runfolder import MANIFEST  # noqa: PLC0415 (CLI start-up)

    run = Path(run)
    if (run / MANIFEST).is_file():
        return {name: run for name in res}
    return {name: run / name for name in res}
