"""``python -m cli analyze``: the analysis notebooks of a dataset, per resolution.

The work is :func:`passage_jax.evaluate.analyze.analyze_notebooks`: the four templates of
``notebooks/`` (dataset, display, metrics, passage_eval_metrics) are written into
``<staging-root>/<N>x<N>/`` with their parameters cell set for that resolution, executed
with ``--execute`` and recorded in ``<staging-root>/analysis_manifest.json``, beside copies
of the source notebooks and a read-only snapshot of the shards (hardlinks or reflinks;
``--copy`` allows an ordinary copy). Exit status:
0 when every notebook was written (and, with ``--execute``, ran without error); 1 when a
cell failed (the notebook, cell index and error are printed and recorded); 2 for bad
input (missing extra, dataset or resolution, a staging root that already holds an
analysis without ``--force``, shards that can be neither linked nor, without ``--copy``,
copied).
"""
from __future__ import annotations

import sys
from pathlib import Path

from cli.console import say
from cli.inputs import require_dataset
from cli.launch import positive_int

__all__ = ["register", "check", "main"]


def register(parser) -> None:
    parser.add_argument("--dataset-path", required=True,
                        help="dataset root, or 'shipped' for the cohort inside the package")
    parser.add_argument("--resolution", required=True, type=positive_int, nargs="+", metavar="N",
                        help="resolution(s) to analyse (folders <N>x<N>)")
    parser.add_argument("--staging-root", required=True, type=Path, metavar="OUT",
                        help="folder that receives <N>x<N>/<notebook>.ipynb and analysis_manifest.json")
    parser.add_argument("--execute", action="store_true",
                        help="run every notebook (kernel python3 of this interpreter) and keep its outputs")
    parser.add_argument("--split", default="test",
                        help="split the metrics notebooks run the planners on (default: %(default)s)")
    parser.add_argument("--census-limit", type=positive_int, default=None, metavar="K",
                        help="scenes per split read by the census (default: all)")
    parser.add_argument("--classical-budget", type=positive_int, default=None, metavar="B",
                        help="tasks each planner runs on in the metrics notebooks "
                             "(default: the templates' own)")
    parser.add_argument("--force", action="store_true",
                        help="write into a staging root that already holds an analysis")
    parser.add_argument("--copy", action="store_true",
                        help="stage the Parquet shards by an ordinary copy where neither a hardlink "
                             "nor a reflink is possible (default: refuse; the dataset is never copied "
                             "silently)")


def check(args) -> None:
    """Before JAX loads: a ``--dataset-path`` folder exists (``shipped`` names none)."""
    require_dataset(args.dataset_path)


def main(args) -> int:
    # command start-up: the library (and JAX) loads only when the command runs
    from passage_jax.evaluate.analyze import (  # noqa: PLC0415 (CLI start-up)
        AnalyzeError,
        MissingDependency,
        StagingExists,
        StagingRefused,
        analyze_notebooks,
    )

    def progress(message: str) -> None:
        say(message, sys.stderr)

    try:
        manifest = analyze_notebooks(args.dataset_path, args.resolution, args.staging_root,
                                     execute=args.execute, census_limit=args.census_limit,
                                     classical_budget=args.classical_budget, split=args.split,
                                     force=args.force, copy=args.copy, progress=progress)
    except MissingDependency as e:
        say(f"analyze: {e}", sys.stderr)
        say("Install the notebook packages with: pip install -e '.[analyze]'", sys.stderr)
        return 2
    except StagingExists as e:
        say(f"analyze: {e}; choose a new --staging-root or pass --force", sys.stderr)
        return 2
    except StagingRefused as e:
        say(f"analyze: staging refused: {e}", sys.stderr)
        return 2
    except AnalyzeError as e:
        say(f"analyze: {e}", sys.stderr)
        return 2
    root = Path(manifest["staging_root"])
    for entry in manifest["notebooks"]:
        took = "" if entry["seconds"] is None else f" ({entry['seconds']:.1f} s)"
        say(f"{entry['status']:>13}  {root / entry['path']}{took}")
    states = manifest["states"]
    staging = manifest["parquet_staging"]
    say(f"notebooks: {states['notebooks']['state']}; parquet staging: {staging['method']} "
        f"({staging['n_files']} shard(s), read-only); publication: "
        f"{states['publication']['state']}")
    for why in states["publication"]["reasons"]:
        say(f"  not admitted for publication: {why}")
    say(f"manifest: {root / 'analysis_manifest.json'}")
    for f in manifest["failed"]:
        say(f"notebook {root / f['path']} failed at cell {f['cell_index']} "
            f"({f['source_head']!r}): {f['ename']}: {f['evalue']}", sys.stderr)
    return 1 if manifest["failed"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
