"""``python -m cli run --spec S --output D [--resume | --dry-run]``: run a planner on frozen tasks.

The spec's planner module is looked for in the spec file's folder, then each
``--planner-path DIR``, then the usual import path (:mod:`passage_jax.run.specification.planner_path`);
:func:`check` refuses a missing spec, a bad spec or a planner module that cannot be found
before JAX loads. Every launch writes ``resolved_protocol.json`` into ``--output``; ``--dry-run`` admits the
spec and writes that record only (no request runs, no seed folder is made). Progress
bars (one per seed, when stderr is a terminal and ``--no-progress`` is not given) draw
the :class:`~passage_jax.run.ProgressEvent` values the run reports (:func:`run_progress`,
also used by ``bench``)."""
from __future__ import annotations

import contextlib
import os
import sys

from cli import inputs, launch
from cli.console import say


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", required=True,
                   help="new (or empty) folder for the run; with --resume, the interrupted run's folder")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --output (same spec, data and references); "
                        "keeps every durable record and runs only what is missing")
    p.add_argument("--dry-run", action="store_true",
                   help="admit the spec and write resolved_protocol.json only: no request runs")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--admission-receipt", default=None, metavar="FILE",
                   help="split_role: test: the green receipt of python -m cli admit-test (default: "
                        "<output>.admission.json)")
    p.add_argument("--without-admission", action="store_true",
                   help="split_role: test: run without a green admission receipt (recorded in each "
                        "seed manifest under provenance.test_admission)")
    inputs.add_planner_path(p)
    p.add_argument("--chunk", type=launch.positive_int, default=None, metavar="K",
                   help="scenes read and qualified together at admission (default: a budget of "
                        "grid cells, 1,024 scenes at 64x64, 64 at 256x256); a multi-process launch "
                        "shares out whole chunks")
    launch.add_flags(p)


def check(args) -> None:
    """Before JAX loads: the flags fit together, the spec parses and passes its schema, and
    its planner module can be found (the spec's folder, then ``--planner-path``, then the
    usual import path)."""
    if args.dry_run and args.resume:
        raise inputs.InputError("--dry-run checks a new run; it cannot be combined with --resume")
    inputs.check_spec(args.spec, args)


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax import cluster  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import (  # noqa: PLC0415 (CLI start-up)
        AdmissionError,
        OutputFolderTaken,
        ResumeError,
        RunError,
        SpecError,
        load_spec,
    )
    from passage_jax.run.specification import planner_import_path  # noqa: PLC0415 (CLI start-up)

    code = launch.join(args, "run")
    if code is not None:
        return code
    try:
        spec = load_spec(args.spec)
        with planner_import_path(inputs.planner_folders_of(spec, args)):
            summary = _run(spec, args)
        if summary is None:
            return 0
    except cluster.ClusterError as e:
        return launch.fail("run", e)
    except OutputFolderTaken as e:
        hint = ("; to continue an interrupted run there, pass --resume"
                if "holds a run" in str(e) else "")
        say(f"run: {e}{hint}", sys.stderr)
        return 2
    except ResumeError as e:
        if args.resume:
            say(f"run --resume: {e}; to start over, run without --resume into a new --output "
                f"folder", sys.stderr)
        else:
            say(f"run: {e}", sys.stderr)
        return 2
    except (SpecError, AdmissionError, RunError) as e:
        say(f"run: {e}", sys.stderr)
        return 2
    if summary.get("follower"):
        print(f"run: process {summary['process_index']} of {cluster.process_count()}: its shares "
              f"of {len(summary['shares'])} seed(s) run and delivered; process 0 wrote the run "
              f"folder", file=sys.stderr)
        return 0
    _print_summary(summary, args.output)
    return 0


def _run(spec, args) -> dict | None:
    """Admit and run ``spec`` (the test admission gate first); None on a process of a
    multi-process launch whose share is delivered."""
    from passage_jax import cluster  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import run_spec  # noqa: PLC0415 (CLI start-up)

    gate = _test_admission(spec, args)
    admitted = None
    if cluster.process_count() > 1 or args.chunk is not None:
        # every process qualifies its share of the references; process 0 alone runs the
        # planner requests (they are timed one at a time), except under a session timing
        # profile or the batched procedure, where each process runs its own session (planner
        # build) on its share of each seed
        admitted = _admit_across_processes(spec, args)
        if admitted is None:
            return None
    with run_progress(False if args.no_progress else None) as progress, gate:
        return run_spec(spec, args.output, progress=progress,
                        log=lambda m: say(m, sys.stderr), resume=args.resume,
                        dry_run=args.dry_run, admitted=admitted)


def _test_admission(spec, args):
    """The test admission gate's hook (docs/admission.md): a context that records what the
    gate found in each seed manifest; raises TestAdmissionRefused (a RunError) when a
    ``split_role: test`` spec has no green receipt that fits and ``--without-admission`` is
    not given. A dry run runs nothing and is not gated."""
    from passage_jax.run.gate import require_admission  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.loop import test_admission_recorded  # noqa: PLC0415 (CLI start-up)

    if args.dry_run:
        return contextlib.nullcontext()
    record = require_admission(spec, args.output, receipt=args.admission_receipt,
                               without=args.without_admission)
    if record is not None and record["status"] == "overridden":
        print("run: split_role: test spec run --without-admission: no green admission receipt; "
              "recorded in the manifests", file=sys.stderr)
    return test_admission_recorded(record)


def _print_summary(summary: dict, output) -> None:
    if summary.get("dry_run"):
        proto = summary["inference_protocol"]
        say(f"dry run: admitted {summary['n_tasks']} tasks; inference protocol {proto['name']!r} "
            f"({'canonical' if proto['canonical'] else 'noncanonical'}); nothing was run; "
            f"record written to {summary['resolved_protocol']}")
        return
    for seed, s in summary["per_seed"].items():
        counts = ", ".join(f"{series}: " + " ".join(f"{k}={v}" for k, v in sorted(c.items()))
                           for series, c in s["status_counts"].items())
        say(f"seed {seed}: {s['n_records']} records ({counts})")
    if summary.get("complete"):
        say(f"run in {output} was already complete; nothing was run")
    else:
        say(f"run written to {output}")


def _admit_across_processes(spec, args):
    """Admission (``--chunk`` scenes at a time), split across the launch's processes: the
    admitted run on process 0 (and, under a session timing profile or the batched
    procedure, on the others, which then run their shares of the requests), None on the
    others (their share is
    delivered). Process 0 first checks that the output folder can receive the run, so that
    no process qualifies anything for a refused run."""
    from passage_jax import cluster  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run import OutputFolderTaken, admit, holds_run  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.loop import splits_requests  # noqa: PLC0415 (CLI start-up)

    why = holds_run(args.output) if cluster.is_writer() and not args.resume else None
    why = cluster.gather_shares(why, what="run: checking the output folder")[0]
    if why:
        raise OutputFolderTaken(why)
    admitted = admit(spec, chunk=args.chunk)
    if cluster.is_writer() or splits_requests(spec):
        return admitted
    print(f"run: process {cluster.process_index()} of {cluster.process_count()}: references "
          f"qualified and delivered; process 0 runs the requests", file=sys.stderr)
    return None


class RunProgress:
    """rich progress bars for a run's progress events: a bar per seed, opened by the event
    that starts the seed (``<method> seed <seed>``) and advanced by each request's
    (``<method> seed <seed> <series>#<repeat>``). The display starts with the first
    event; :meth:`stop` ends it."""

    def __init__(self):
        self._bars = None
        self._bar = None

    def __call__(self, event) -> None:
        bars = self._display()
        label = f"{event.method} seed {event.seed}"
        if event.series is None or self._bar is None:
            self._bar = bars.add_task(label, total=event.total, completed=event.done)
        else:
            bars.update(self._bar, completed=event.done,
                        description=f"{label} {event.series}#{event.repeat}")

    def _display(self):
        if self._bars is None:
            from rich.progress import (  # noqa: PLC0415 (CLI start-up)
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
            self._bars.start()
        return self._bars

    def stop(self) -> None:
        if self._bars is not None:
            self._bars.stop()


@contextlib.contextmanager
def run_progress(progress=None):
    """The ``progress`` callback for :func:`passage_jax.run.run_spec`: ``progress`` itself
    when it is callable; otherwise progress bars (:class:`RunProgress`) when ``progress``
    is true, or None and stderr is a terminal; otherwise None (no progress)."""
    if callable(progress):
        yield progress
        return
    if not (os.isatty(2) if progress is None else progress):
        yield None
        return
    bars = RunProgress()
    try:
        yield bars
    finally:
        bars.stop()
