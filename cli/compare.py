"""``python -m cli compare --score A --score B --output F``: paired comparison of two scored runs."""
from __future__ import annotations

import json
import sys

from cli import inputs
from cli.console import make_console, say, text


def register(p):
    p.add_argument("--score", action="append", required=True, metavar="RUN",
                   help="a scored run folder or seed folder; give exactly two (A then B)")
    p.add_argument("--output", required=True, help="comparison JSON to write (new file)")
    p.add_argument("--n-bootstrap", "--bootstrap-resamples", dest="n_bootstrap", type=int, default=10000,
                   help="paired block-bootstrap draws (default 10000; --bootstrap-resamples is the former "
                        "spelling)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--alpha", type=float, default=0.05, help="interval level (default 0.05)")
    p.add_argument("--roster", default=None, help="frozen task roster (passage-roster-v1/v2)")
    p.add_argument("--roster-sha256", default=None, help="required sha256 of the roster file")
    p.add_argument("--odd-spec", default=None,
                   help="YAML/JSON ODD bins: {stratifiers: {name: [edges...]}}")
    p.add_argument("--require-identical-limits", action="store_true",
                   help="also refuse runs whose budgets, timing series, deadlines or timing "
                        "boundaries (in process / supervised) differ")
    p.add_argument("--allow-precision-mix", action="store_true",
                   help="pair runs whose references came from different arithmetic paths (float64 / "
                        "double-float); their c* must agree within the looser stated tolerance")
    p.add_argument("--allow-noncanonical", action="store_true",
                   help="pair a run under the canonical inference protocol with a noncanonical one")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("--shard-draws", action="store_true",
                   help="split the bootstrap draws over all local devices (same results)")
    p.add_argument("--paired-test", choices=("randomization",), default=None,
                   help="run the confirmatory test: block randomization per primary metric, "
                        "Holm at family-wise 0.05 (needs the three default seeds and known blocks)")
    p.add_argument("--test-evidence", default=None, metavar="FILE",
                   help="JSON with p_values (the six primary metrics), paired_test and "
                        "test_assumptions from a declared paired test; fed to Holm")
    p.add_argument("--randomization-draws", type=int, default=9999,
                   help="random swap patterns when the blocks are too many to enumerate "
                        "(default 9999; drawn from --bootstrap-seed)")


def check(args) -> None:
    """Before JAX loads: each ``--score`` run and each named input file exists."""
    for run in args.score:
        inputs.require_folder(run, "scored run")
    inputs.require_file(args.roster, "--roster")
    inputs.require_file(args.odd_spec, "--odd-spec")
    inputs.require_file(args.test_evidence, "--test-evidence")


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def hint(e) -> str:
    """The command-line flag that answers a library error, if one does."""
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate.compare import (  # noqa: PLC0415 (CLI start-up)
        InvalidResamples,
        LimitsDiffer,
        NoncanonicalPairing,
        OutputExists,
        PrecisionMismatch,
        RosterHashMissing,
        TestEvidenceError,
    )

    if isinstance(e, OutputExists):
        return " (or pass --force to replace it)"
    if isinstance(e, InvalidResamples):
        return " (--n-bootstrap)"
    if isinstance(e, RosterHashMissing):
        return " (--roster and --roster-sha256 go together)"
    if isinstance(e, PrecisionMismatch):
        return " (pass --allow-precision-mix to pair them anyway)"
    if isinstance(e, NoncanonicalPairing):
        return " (pass --allow-noncanonical to pair them anyway)"
    if isinstance(e, LimitsDiffer):
        return " (--require-identical-limits)"
    if isinstance(e, TestEvidenceError):
        return " (--paired-test / --test-evidence)"
    return ""


def options(args):
    """The :class:`~passage_jax.evaluate.compare._options.CompareOptions` of the flags."""
    from passage_jax.evaluate.compare import CompareOptions  # noqa: PLC0415 (CLI start-up)

    return CompareOptions(n_bootstrap=args.n_bootstrap, alpha=args.alpha,
                          bootstrap_seed=args.bootstrap_seed, roster=args.roster,
                          roster_sha256=args.roster_sha256, odd_spec=args.odd_spec,
                          require_identical_limits=args.require_identical_limits,
                          force=args.force, shard_draws=args.shard_draws,
                          allow_noncanonical=args.allow_noncanonical,
                          allow_precision_mix=args.allow_precision_mix,
                          paired_test=args.paired_test, test_evidence=args.test_evidence,
                          randomization_draws=args.randomization_draws)


def main(args) -> int:
    from passage_jax.evaluate import CompareError, compare_runs  # noqa: PLC0415 (CLI start-up)

    if len(args.score) != 2:
        print("compare: give --score exactly twice (A, then B)", file=sys.stderr)
        return 2
    try:
        res = compare_runs(args.score[0], args.score[1], args.output, options=options(args))
    except CompareError as e:
        say(f"compare: {e}{hint(e)}", sys.stderr)
        return 2
    print_contrasts(res)
    print_confirmatory(res)
    print_limits(res)
    say(f"comparison written to {args.output}")
    return 0


def _limit_text(v, limit: int = 60) -> str:
    text = json.dumps(v, sort_keys=True) if not isinstance(v, str) else v
    return text if len(text) <= limit else text[:limit - 3] + "..."


def print_limits(res: dict) -> None:
    """A warning naming the procedure limits that differ with each run's value (the report's
    "differs"), and one more when the timing boundaries do."""
    lim = res["procedure_limits"]
    if not lim["differ"]:
        return
    values = "; ".join(f"{k}: A {_limit_text(lim['A'].get(k))} vs B {_limit_text(lim['B'].get(k))}"
                       for k in lim["differ"])
    say(f"warning: procedure limits differ: {', '.join(lim['differ'])} ({values}); the runs "
        f"were not measured under the same procedure (--require-identical-limits refuses "
        f"such a pair)")
    if "timing_boundary" in lim["differ"]:
        say(f"timing boundaries differ (A {lim['A']['timing_boundary']}, B "
            f"{lim['B']['timing_boundary']}): the latency contrast is not like-for-like")


def print_contrasts(res: dict) -> None:
    """The six primary contrasts of a comparison, as a table on the console."""
    from rich.table import Table  # noqa: PLC0415 (CLI start-up)

    a, b = res["runs"]["A"]["method_name"], res["runs"]["B"]["method_name"]
    t = Table(title=text(f"{a} (A) − {b} (B), uncertainty {res['blocks']['uncertainty_status']}"))
    head = ("seed-mean Δ" if res["seed_mean"] else
            "Δ" if len(res["pairs"]) == 1 else "mean Δ over pairs")
    for c in ("metric", head, "low", "high"):
        t.add_column(c, justify="left" if c == "metric" else "right")
    for k, c in res["contrasts"].items():
        t.add_row(*map(text, (k, _num(c["delta"]), _num(c.get("ci_low")), _num(c.get("ci_high")))))
    console = make_console()
    console.print(t)
    from cli.console import contrast_footnotes, print_footnotes  # noqa: PLC0415 (CLI start-up)

    print_footnotes(contrast_footnotes(res), console)


def print_confirmatory(res: dict) -> None:
    """The confirmatory test's p-values, Holm decisions, votes and verdict, when one ran."""
    c = res.get("confirmatory")
    if not c:
        return
    from rich.table import Table  # noqa: PLC0415 (CLI start-up)

    src = ("block randomization" if c["source"] == "randomization"
           else f"evidence file {c['evidence_file']['path']}")
    t = Table(title=text(f"confirmatory test ({src}), Holm at family-wise {c['family_alpha']:g}"))
    for col in ("metric", "p", "Holm-adjusted p", "reject", "vote"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m, h in (c["holm"] or {}).items():
        t.add_row(*map(text, (m, _num(h["p_value"]), _num(h["adjusted"]),
                              "yes" if h["reject"] else "no", c["votes"].get(m) or "-")))
    make_console().print(t)
    say(f"decision: {c['decision']}" + (f", winner {c['winner']}" if c.get("winner") else "")
        + f" (test: {c['paired_test']}; assumptions recorded, not verified)")
