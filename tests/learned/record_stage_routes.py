"""Record the learned stage routes under this JAX release and CPU vector extension.

    python -m tests.learned.record_stage_routes

Runs every recorded spec and variant of ``tests/learned/test_stages.py`` on the shipped
cohort and adds (or replaces) the recording of this machine's ``recorded_with`` in
``tests/fixtures/golden/learned_stage_routes.json``. The routes on the learned field
depend on the network's last bits, which differ between XLA releases and between CPUs of
one release; the octile-guide routes do not, and a recording whose octile routes differ
from the first recording's is refused. A new recording guards the routes on its machine
against later changes of the code; the first one is the routes of the former flat keys.
"""
from __future__ import annotations

import sys

from passage_jax.fileio import atomic_write_json, read_document
from tests.learned import test_stages as t


def main() -> int:
    doc = read_document(t.GOLDEN, ValueError, "golden")
    now = t.here()
    runs = {name: t.recorded_digests(name) for name in sorted(t.RECORDED)}
    octile = [n for n in runs if t._kwargs(n)[0].get("guide") == "octile"]
    moved = [n for n in octile if runs[n] != t.RECORDED[n]]
    if moved:
        print(f"the octile-guide routes of {moved} differ from the first recording's: the code "
              f"changed them; nothing written", file=sys.stderr)
        return 1
    kept = [r for r in doc["recordings"] if r["recorded_with"] != now]
    doc["recordings"] = kept + [{"recorded_with": now, "runs": runs}]
    atomic_write_json(t.GOLDEN, doc)
    print(f"{t.GOLDEN}: recorded {len(runs)} runs under {now}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
