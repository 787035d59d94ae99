"""``python -m cli conform --spec S --output D [--planner-path DIR]``: interface checks with
a receipt. The planner module is looked for in the spec's folder, then each
``--planner-path``, then the usual import path (docs/runner.md)."""
from __future__ import annotations

import sys

from cli import inputs
from cli.console import say

#: longest reason printed for a failed check (the full one is in conformance.json)
REASON_CHARS = 200


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters with "..."."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", required=True, help="new (or empty) folder for conformance.json")
    inputs.add_planner_path(p)


def check(args) -> None:
    """Before JAX loads: the spec parses and passes its schema, and its planner module can be
    found."""
    inputs.check_spec(args.spec, args)


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.run import AdmissionError, RunError, SpecError, conform, load_spec  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.conform import failure_reason  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.specification import planner_import_path  # noqa: PLC0415 (CLI start-up)

    try:
        spec = load_spec(args.spec)
        with planner_import_path(inputs.planner_folders_of(spec, args)):
            receipt = conform(spec, args.output)
    except (SpecError, AdmissionError, RunError) as e:
        say(f"conform: {e}", sys.stderr)
        return 2
    for c in receipt["checks"]:
        mark = "pass" if c["passed"] else "FAIL"
        why = failure_reason(c)
        say(f"  [{mark}] {c['name']}" + (f": {one_line(why)}" if why else ""))
    verdict = "passed" if receipt["passed"] else "FAILED"
    say(f"conformance {verdict}: {args.output}/conformance.json")
    return 0 if receipt["passed"] else 1
