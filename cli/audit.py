"""``python -m cli audit``: validate a dataset root and summarise it.

The audit itself is :func:`passage_jax.data.audit_dataset`; this command parses the
arguments, prints its tables, writes the JSON and sets the exit status: 0 when
every scene validates and qualifies, 1 when any scene fails either, 2 when the
layout itself is wrong (missing root, resolution or split folder) or the
``--json`` file already exists (it is replaced only with ``--force``). A
reference task censored at its solve budget is reported (table, stderr, JSON)
but fails nothing. What the dataset's files hold (paths, scene ids, errors) is printed
as text, never as rich markup, with control characters escaped (:mod:`cli.console`).
"""
from __future__ import annotations

import sys
from pathlib import Path

from rich.table import Table

from cli import inputs, launch
from cli.console import make_console, say, text
from passage_jax.contract import OBJECTIVES, VARIANTS


def register(parser) -> None:
    parser.add_argument("--dataset-path", required=True, type=Path, help="dataset root")
    parser.add_argument("--resolution", required=True, type=int, nargs="+", metavar="N",
                        help="resolution(s) to audit (folders <N>x<N>)")
    parser.add_argument("--split", nargs="+", default=None, metavar="S",
                        help="split(s) to audit (aliases val, calib accepted; default: all present)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write the facts as JSON (atomically); an existing file is "
                             "refused unless --force")
    parser.add_argument("--force", action="store_true", help="replace an existing --json file")
    parser.add_argument("--workers", type=int, default=4, help="decode threads (default: %(default)s)")
    parser.add_argument("--no-qualify", dest="qualify", action="store_false",
                        help="skip reference qualification (validation, census and summaries only)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--max-expansions", type=launch.positive_int, default=None, metavar="K",
                        help="expansion budget per task of the A* cross-check (default: "
                             "DEFAULT_EXPANSIONS_PER_CELL of passage_jax.data.audit x N*N at "
                             "resolution N); a task whose solve runs out is censored, not failed")
    budget.add_argument("--unbounded", action="store_true",
                        help="no expansion budget: every A* cross-check runs to the end")
    launch.add_flags(parser)


def _fmt3(s, digits=3, pct=False):
    if s is None:
        return "-"
    f = (lambda v: f"{100 * v:.0f}") if pct else (lambda v: f"{v:.{digits}g}")
    return "/".join(f(s[k]) for k in ("min", "median", "max"))


def print_report(report: dict, console) -> None:
    """The audit's tables: scenes per split, route lengths, failing scenes."""
    res = report["summary"]["resolutions"]
    t = Table(title=text(f"scenes in {report['summary']['dataset_path']}"),
              caption="qualified: reference tasks qualified / tasks (contract §3); censored: tasks "
                      "whose exact solve ran out of its budget; "
                      "coverage: obstacle share (min/med/max); blocks: count (largest share) "
                      "under main_tile_5deg and union_5deg")
    for col in ("res", "split", "scenes", "valid", "bad", "qualified", "censored", "coverage %",
                "main 5°", "union 5°"):
        t.add_column(col, justify="left" if col == "split" else "right", no_wrap=True)
    for n, r in res.items():
        for split, s in r["splits"].items():
            blocks = []
            for rule in ("main_tile_5deg", "union_5deg"):
                c = s["blocks"][rule]
                share = "-" if c["largest_share"] is None else f"{100 * c['largest_share']:.0f}%"
                blocks.append(f"{c['n_blocks']} ({share})")
            q = s.get("qualification")
            qual = text("-") if q is None else text(
                f"{q['n_qualified']}/{q['n_tasks']}",
                "red" if q["n_qualified"] + q["n_censored"] < q["n_tasks"] else None)
            cens = text("-") if q is None else text(q["n_censored"],
                                                    "yellow" if q["n_censored"] else None)
            t.add_row(text(n), text(split), text(s["n_scenes"]), text(s["n_valid"]),
                      text(s["n_invalid"], "red" if s["n_invalid"] else None), qual, cens,
                      text(_fmt3(s["obstacle_coverage"], pct=True)), *map(text, blocks))
    console.print(t)
    b = report["summary"].get("reference_budget")
    if b is not None and report["summary"]["reference_qualification"] == "checked":
        per = ", ".join(f"{n}: {'unbounded' if k is None else k}"
                        for n, k in b["max_expansions"].items())
        console.print(text(f"A* cross-check budget ({b['mode']}, expansions per task by "
                           f"resolution): {per}; value iteration: {b['max_sweeps']} sweeps"))
    t = Table(title="released route length in cells (min/median/max)")
    for col in ("res", "split", "variant", *OBJECTIVES):
        t.add_column(col, justify="right" if col == "res" else "left", no_wrap=True)
    for n, r in res.items():
        for split, s in r["splits"].items():
            for v in VARIANTS:
                t.add_row(text(n), text(split), text(v),
                          *[text(_fmt3(s["route_cells"][f"{o}/{v}"], digits=6)) for o in OBJECTIVES])
    console.print(t)
    failing = report["summary"]["failing"]
    if failing:
        f = Table(title=text(f"{len(failing)} scene(s) fail validation", "red"))
        for col in ("id", "res", "split", "first error"):
            f.add_column(col, overflow="fold")
        for e in failing:
            f.add_row(text(e["id"]), text(e["resolution"]), text(e["split"]), text(e["error"]))
        console.print(f)


def _json_problem(path: Path | None, force: bool) -> str | None:
    """Why the ``--json`` file cannot be written, or None: a folder is never replaced,
    an existing file only with ``force``."""
    if path is None:
        return None
    if path.is_dir():
        return f"audit: --json {path} is a folder; name a file"
    if (path.exists() or path.is_symlink()) and not force:
        return f"audit: {path} exists; choose a new file (or pass --force to replace it)"
    return None


def check(args) -> None:
    """Before JAX loads: the dataset root exists."""
    inputs.require_dataset(args.dataset_path)


def main(args) -> int:
    # command start-up: the library (and JAX) loads only when the command runs
    from passage_jax import cluster  # noqa: PLC0415 (CLI start-up)
    from passage_jax.data import DataError, audit_dataset  # noqa: PLC0415 (CLI start-up)
    from passage_jax.fileio import atomic_write_json  # noqa: PLC0415 (CLI start-up)

    console = make_console(width=None if sys.stdout.isatty() else 120)
    taken = _json_problem(args.json, args.force)
    if taken:
        say(taken, sys.stderr)
        return 2
    code = launch.join(args, "audit")
    if code is not None:
        return code
    try:
        budget = (None if args.unbounded else
                  "default" if args.max_expansions is None else args.max_expansions)
        report = audit_dataset(args.dataset_path, args.resolution, args.split, workers=args.workers,
                               qualify=args.qualify, budget=budget)
    except DataError as e:
        say(f"audit: {e}", sys.stderr)
        return 2
    except cluster.ClusterError as e:
        return launch.fail("audit", e)
    failing = report["summary"]["failing"]
    unqualified = report["summary"]["unqualified"]
    if not cluster.is_writer():  # every process holds the whole report; process 0 prints it
        say(f"audit: process {cluster.process_index()} of {cluster.process_count()}: share "
            f"delivered; process 0 reports", sys.stderr)
        return 1 if failing or unqualified else 0
    print_report(report, console)
    if args.json is not None:
        taken = _json_problem(args.json, args.force)  # the file may have appeared meanwhile
        if taken:
            say(taken, sys.stderr)
            return 2
        atomic_write_json(args.json, report)
        console.print(text(f"wrote {args.json}"))
    for e in failing:
        say(f"invalid scene {e['id']} ({e['resolution']}x{e['resolution']} {e['split']}): "
            f"{e['error']}", sys.stderr)
    for e in unqualified:
        say(f"unqualified reference: {e['reason']}", sys.stderr)
    n_censored = report["summary"]["n_censored"]
    if n_censored:
        print(f"{n_censored} reference task(s) censored at their solve budget (neither qualified "
              "nor failed; listed under summary.censored in the JSON)", file=sys.stderr)
    return 1 if failing or unqualified else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
