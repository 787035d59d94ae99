"""``python -m cli bench --spec S``: run + score a spec, write sidecar.json, print the table."""
from __future__ import annotations

import sys


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", default=None,
                   help="new folder for the results (default: a fresh timestamped folder under "
                        "the spec's results_root)")
    p.add_argument("--container-digest", default=None,
                   help="declared container image digest to record in sidecar.json "
                        "(default: $PASSAGE_CONTAINER_DIGEST, else absent)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def main(args) -> int:
    from passage_jax.runner import AdmissionError, RunError, SpecError
    from passage_jax.runner.bench import bench
    from passage_jax.runner.report import print_metrics_table
    from passage_jax.runner.score import ScoreError

    try:
        res = bench(args.spec, args.output, container_digest=args.container_digest,
                    progress=False if args.no_progress else None,
                    log=lambda m: print(m, file=sys.stderr))
    except (SpecError, AdmissionError, RunError, ScoreError) as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    side = res["sidecar"]
    sub = side["evaluated_subset"]
    print_metrics_table(res["scores"], title=(
        f"{side['method_name']}: {sub['n_tasks']} tasks, {sub['resolution']}x{sub['resolution']} "
        f"{sub['split']}, {sub['cost_model']}/{sub['task_variant']}"))
    print(f"results in {res['output']} (sidecar.json, seed-*/metrics.json, per_sample.npz)")
    return 0
