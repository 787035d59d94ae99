"""``python -m cli admit-test --spec S --output D [--receipt F] [--calibration-sha256 H]
[--evaluator-commit C]``: the test admission gate (docs/admission.md).

``D`` is the folder the test run will write (``run --spec S --output D``). Every condition
is checked and printed (met or unmet, with its reason); the receipt is written
atomically to ``F`` (default ``D.admission.json``, beside the folder). Exit status 0 when
the receipt is green, 1 when a condition is unmet (each one named), 2 for bad usage (a
spec file that does not exist: no receipt is written).
"""
from __future__ import annotations

import sys

from cli.console import say

__all__ = ["register", "main"]


def register(p):
    p.add_argument("--spec", required=True, help="the split_role: test run spec (YAML or JSON)")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="the result folder the test run will write (new or empty)")
    p.add_argument("--receipt", default=None, metavar="FILE",
                   help="where the receipt is written (default: DIR.admission.json)")
    p.add_argument("--calibration-sha256", default=None, metavar="HEX",
                   help="the canonical-JSON sha256 of the calibration decisions as frozen; the "
                        "file must still hash to it")
    p.add_argument("--evaluator-commit", default=None, metavar="COMMIT",
                   help="the declared evaluator commit (40 hex), instead of a clean git work tree; "
                        "with a git checkout it must be HEAD")


def check(args) -> None:
    """Before JAX loads: the spec file exists (no receipt is written otherwise)."""
    from pathlib import Path  # noqa: PLC0415 (CLI start-up)

    from cli.inputs import InputError  # noqa: PLC0415 (CLI start-up)

    if not Path(args.spec).is_file():
        raise InputError(f"spec {args.spec}: file not found (no receipt written)")


def main(args) -> int:
    from passage_jax.run.gate import admit_test  # noqa: PLC0415 (CLI start-up)

    result = admit_test(args.spec, args.output, receipt=args.receipt,
                        calibration_sha256=args.calibration_sha256,
                        evaluator_commit_declared=args.evaluator_commit)
    width = max(len(r["condition"]) for r in result.receipt["conditions"])
    for row in result.receipt["conditions"]:
        mark = "met  " if row["met"] else "UNMET"
        say(f"{mark}  {row['condition']:<{width}}  {row['detail']}")
    say(f"receipt: {result.path} ({'green' if result.green else 'not green'})")
    say(f"note: {result.receipt['statement']}")
    if result.green:
        return 0
    say(f"admit-test: refused: unmet condition(s): {', '.join(result.unmet)}", sys.stderr)
    return 1
