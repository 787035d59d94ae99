"""``python -m cli conform --spec S --output D``: interface checks with a receipt."""
from __future__ import annotations

import sys

#: longest reason printed for a failed check (the full one is in conformance.json)
REASON_CHARS = 200


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters with "..."."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def register(p):
    p.add_argument("--spec", required=True, help="run spec (YAML or JSON)")
    p.add_argument("--output", required=True, help="new (or empty) folder for conformance.json")


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.run import AdmissionError, RunError, SpecError, conform, load_spec  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.conform import failure_reason  # noqa: PLC0415 (CLI start-up)

    try:
        receipt = conform(load_spec(args.spec), args.output)
    except (SpecError, AdmissionError, RunError) as e:
        print(f"conform: {e}", file=sys.stderr)
        return 2
    for c in receipt["checks"]:
        mark = "pass" if c["passed"] else "FAIL"
        why = failure_reason(c)
        print(f"  [{mark}] {c['name']}" + (f": {one_line(why)}" if why else ""))
    verdict = "passed" if receipt["passed"] else "FAILED"
    print(f"conformance {verdict}: {args.output}/conformance.json")
    return 0 if receipt["passed"] else 1
