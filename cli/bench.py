"""``python -m cli bench --spec S [--against B]``: run + score a spec, write sidecar.json,
print the table; with ``--against``, also run + score the baseline spec ``B`` on the
same tasks, compare the two (paired block bootstrap) and write the report.

Output folders are absolute and checked like a run's (:mod:`passage_jax.run.loop`): the
default ``<results_root>/<method_name>-<time>`` never leaves ``results_root`` (a
``method_name`` is a plain name), and no output lies inside the dataset root.

The command composes the two rooms: :func:`passage_jax.run.run_spec` runs the spec,
:func:`passage_jax.evaluate.score_run` scores the persisted routes and
:func:`passage_jax.evaluate.sidecar` describes the result.
"""
from __future__ import annotations

import sys

from cli import inputs
from cli.console import say


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", default=None,
                   help="new folder for the results (default: a fresh timestamped folder under "
                        "the spec's results_root)")
    p.add_argument("--container-digest", default=None,
                   help="declared container image digest to record in sidecar.json "
                        "(default: $PASSAGE_CONTAINER_DIGEST, else absent)")
    p.add_argument("--against", default=None, metavar="BASELINE_SPEC",
                   help="also run the baseline spec on the same tasks, then compare (method A = --spec, "
                        "B = the baseline) and write <output>/compare.json and <output>/report/report.md")
    p.add_argument("--n-bootstrap", "--bootstrap-resamples", dest="n_bootstrap", type=int, default=10000,
                   help="paired block-bootstrap draws of the comparison (with --against; "
                        "--bootstrap-resamples is the former spelling)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    inputs.add_planner_path(p)


def check(args) -> None:
    """Before JAX loads: the spec (and the baseline spec) parse and pass their schema, and
    their planner modules can be found (each spec's own folder, then ``--planner-path``)."""
    inputs.check_spec(args.spec, args)
    if args.against is not None:
        inputs.check_spec(args.against, args, what="baseline spec")


def bench(spec, output=None, container_digest=None, progress=None, log=None, *,
          planner_path=()) -> dict:
    """Run + score ``spec`` (a path or a RunSpec) and write ``sidecar.json``. ``progress``:
    a callback for the run's progress events, or whether to draw progress bars (None:
    when stderr is a terminal; :func:`cli.run.run_progress`). The planner module is looked
    for in the spec's folder, then each of ``planner_path``, then the usual import path."""
    # command start-up: the library loads only when the command runs (--help stays instant)
    from cli.run import run_progress  # noqa: PLC0415 (CLI start-up)
    from passage_jax.evaluate import default_output, score_run, sidecar  # noqa: PLC0415 (CLI start-up)
    from passage_jax.fileio import atomic_write_json  # noqa: PLC0415 (CLI start-up)
    from passage_jax.protocol.runfolder import SIDECAR  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import RunSpec, load_spec, run_spec  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.loop import output_folder  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.specification import (  # noqa: PLC0415 (CLI start-up)
        planner_folders,
        planner_import_path,
    )

    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = output_folder(output if output is not None else default_output(spec))
    with run_progress(progress) as bars, \
            planner_import_path(planner_folders(spec.source, planner_path)):
        run_spec(spec, output, progress=bars, log=log)
    scores = score_run(output, log=log)
    side = sidecar(output, spec, scores, container_digest)
    atomic_write_json(output / SIDECAR, side)
    return {"output": output, "scores": scores, "sidecar": side}


def against(spec, baseline, output=None, container_digest=None, progress=None, log=None,
            n_bootstrap: int = 10000, *, planner_path=()) -> dict:
    """Bench ``spec`` and ``baseline`` into ``<output>/<method_name>``, compare them into
    ``<output>/compare.json`` and write ``<output>/report/report.md`` (figures, and the
    component-attribution table when a run declares ``component_control``)."""
    from passage_jax.evaluate import compare_runs, default_output, write_report  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import OutputFolderTaken, holds_run, load_spec  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.loop import output_folder  # noqa: PLC0415 (CLI start-up)

    spec, baseline = load_spec(spec), load_spec(baseline)
    if spec.method_name == baseline.method_name:
        raise ValueError(f"the spec and the baseline share the method name {spec.method_name!r}")
    output = output_folder(output if output is not None else default_output(spec))
    why = holds_run(output)
    if why:
        raise OutputFolderTaken(why)
    a = bench(spec, output / spec.method_name, container_digest, progress, log,
              planner_path=planner_path)
    b = bench(baseline, output / baseline.method_name, container_digest, progress, log,
              planner_path=planner_path)
    cmp = compare_runs(a["output"], b["output"], output / "compare.json", n_bootstrap=n_bootstrap)
    report = write_report(output / "compare.json", output / "report" / "report.md")
    return {"output": output, "runs": (a, b), "compare": cmp, "report": report}


def _print_bench(res: dict) -> None:
    from cli.console import print_metrics_table  # noqa: PLC0415 (CLI start-up)
    from cli.score import seed_folders_of  # noqa: PLC0415 (CLI start-up)

    side = res["sidecar"]
    sub = side["evaluated_subset"]
    print_metrics_table(res["scores"], title=(
        f"{side['method_name']}: {sub['n_tasks']} tasks, {sub['resolution']}x{sub['resolution']} "
        f"{sub['split']}, {sub['cost_model']}/{sub['task_variant']}"),
        folders=seed_folders_of(res["output"], res["scores"]))


def main(args) -> int:
    from cli.compare import hint, print_contrasts  # noqa: PLC0415 (CLI start-up)
    from passage_jax.evaluate import CompareError, ReportError, ScoreError  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import AdmissionError, RunError, SpecError  # noqa: PLC0415 (CLI start-up)

    progress = False if args.no_progress else None
    log = lambda m: say(m, sys.stderr)  # noqa: E731
    try:
        if args.against:
            res = against(args.spec, args.against, args.output, args.container_digest, progress, log,
                          n_bootstrap=args.n_bootstrap, planner_path=args.planner_path)
        else:
            res = bench(args.spec, args.output, container_digest=args.container_digest,
                        progress=progress, log=log, planner_path=args.planner_path)
    except (SpecError, AdmissionError, RunError, ScoreError, ReportError, ValueError) as e:
        say(f"bench: {e}", sys.stderr)
        return 2
    except CompareError as e:
        say(f"bench: {e}{hint(e)}", sys.stderr)
        return 2
    if not args.against:
        _print_bench(res)
        say(f"results in {res['output']} (sidecar.json, seed-*/metrics.json, per_sample.npz)")
        return 0
    for r in res["runs"]:
        _print_bench(r)
    print_contrasts(res["compare"])
    out = res["output"]
    say(f"results in {out}: one folder per method (sidecar.json, seed-*/metrics.json, "
        f"per_sample.npz), compare.json, report/report.md")
    return 0
