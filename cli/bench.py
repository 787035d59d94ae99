"""``python -m cli bench --spec S``: run + score a spec, write sidecar.json, print the table.

The command composes the two rooms: :func:`passage_jax.run.run_spec` runs the spec,
:func:`passage_jax.evaluate.score_run` scores the persisted routes and
:func:`passage_jax.evaluate.sidecar` describes the result.
"""
from __future__ import annotations

import sys
from pathlib import Path


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", default=None,
                   help="new folder for the results (default: a fresh timestamped folder under "
                        "the spec's results_root)")
    p.add_argument("--container-digest", default=None,
                   help="declared container image digest to record in sidecar.json "
                        "(default: $PASSAGE_CONTAINER_DIGEST, else absent)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def bench(spec, output=None, container_digest=None, progress=None, log=None) -> dict:
    """Run + score ``spec`` (a path or a RunSpec) and write ``sidecar.json``."""
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate import default_output, score_run, sidecar  # noqa: PLC0415 (CLI start-up)
    from passage_jax.fileio import atomic_write_json  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import RunSpec, load_spec, run_spec  # noqa: PLC0415 (CLI start-up)

    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = Path(output) if output is not None else default_output(spec)
    run_spec(spec, output, progress=progress, log=log)
    scores = score_run(output, log=log)
    side = sidecar(output, spec, scores, container_digest)
    atomic_write_json(output / "sidecar.json", side)
    return {"output": output, "scores": scores, "sidecar": side}


def main(args) -> int:
    from passage_jax.evaluate import ScoreError, print_metrics_table  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import AdmissionError, RunError, SpecError  # noqa: PLC0415 (CLI start-up)

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
