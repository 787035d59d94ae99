"""``python -m cli check-entry RUN_OR_COMPARE ... [--json]``: the reproducible-entry check
(docs/admission.md).

Each argument is a scored run folder or a compare JSON file (which adds the two runs it
names and their seed-replicated intervals). Prints, per entry, what is present and what
is missing; exit status 0 when every entry is complete, 1 when anything is missing, 2 for
bad input. A green test admission gate is a separate thing from a reproducible entry.
"""
from __future__ import annotations

import json
import os
import sys

from cli.console import say

__all__ = ["register", "main"]


def register(p):
    p.add_argument("paths", nargs="+", metavar="RUN_OR_COMPARE",
                   help="a scored run folder or a compare JSON file (repeatable)")
    p.add_argument("--json", action="store_true", help="print the check as JSON")


def check(args) -> None:
    """Before JAX loads: every run folder or compare file named exists."""
    from cli.inputs import InputError  # noqa: PLC0415 (CLI start-up)

    for p in args.paths:
        if not os.path.lexists(p):
            raise InputError(f"{p}: no such run folder or compare file")


def main(args) -> int:
    from passage_jax.evaluate.entry_check import EntryError, check_entries, format_table  # noqa: PLC0415

    try:
        result = check_entries(args.paths)
    except EntryError as e:
        say(f"check-entry: {e}", sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:  # a table: each line shown with its control characters escaped
        for line in format_table(result).splitlines():
            say(line)
    if result["reproducible"]:
        return 0
    missing = sorted({k for e in result["entries"] for k in e["missing"]})
    say(f"check-entry: not a reproducible entry: missing {', '.join(missing)}", sys.stderr)
    return 1
