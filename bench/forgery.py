"""Consistent forgeries of a scored run, for the hostile probes (``bench/hostile.py``) and
the tests that check a reader re-derives what it reads (``tests/trust/test_run_folder.py``,
``tests/fixtures/fixtures_runner.py``): each edits a copy and rewrites every hash and identity that
would otherwise show the edit, so only a recomputation can catch it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from passage_jax.fileio import sha256_file
from passage_jax.protocol.records import pack_routes, references_identity, unpack_routes

__all__ = ["renamed_copy", "forged_references", "scale_c_star", "reverse_routes"]


def renamed_copy(src, dest, name: str) -> Path:
    """Copy a scored run under the method name ``name``, as if it had been run under it:
    the name in ``run.json``, ``run_started.json``, every seed's manifest and
    ``metrics.json``, and the receipts' hashes of the two files (the scores are unchanged,
    so nothing is scored again)."""
    dest = Path(dest)
    shutil.copytree(src, dest)
    for f in [dest / "run.json", dest / "run_started.json", *dest.glob("seed-*/manifest.json"),
              *dest.glob("seed-*/metrics.json")]:
        doc = json.loads(f.read_text())
        doc["method_name"] = name
        f.write_text(json.dumps(doc))
    for seed in dest.glob("seed-*"):
        rec = json.loads((seed / "score_receipt.json").read_text())
        rec["inputs"]["manifest.json"] = sha256_file(seed / "manifest.json")
        rec["outputs"]["metrics.json"] = sha256_file(seed / "metrics.json")
        (seed / "score_receipt.json").write_text(json.dumps(rec))
    return dest


def forged_references(src, dest, edit, started: bool = True) -> Path:
    """Copy a run with every seed's ``references.npz`` edited by ``edit(arrays)``, its
    identity, each manifest's file hash and references identity and, with ``started``,
    the identity of ``run_started.json`` rewritten to match: a forgery that no hash or
    identity shows."""
    dest = Path(dest)
    shutil.copytree(src, dest)
    identity = None
    for seed in sorted(dest.glob("seed-*")):
        with np.load(seed / "references.npz", allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        edit(a)
        identity = references_identity(a["sample_id"], a["c_star"], a["route_coords"], a["route_offsets"],
                                       a["qualified"])
        a["identity"] = np.array(identity)
        np.savez_compressed(seed / "references.npz", **a)
        doc = json.loads((seed / "manifest.json").read_text())
        doc["files"]["references.npz"] = sha256_file(seed / "references.npz")
        doc["references"]["identity"] = identity
        (seed / "manifest.json").write_text(json.dumps(doc))
    if started:
        st = json.loads((dest / "run_started.json").read_text())
        st["identity"]["references"]["identity"] = identity
        (dest / "run_started.json").write_text(json.dumps(st))
    return dest


def scale_c_star(factor):
    """An ``edit`` that scales every reference cost by ``factor``."""
    def edit(a):
        a["c_star"] = a["c_star"] * factor
    return edit


def reverse_routes(a) -> None:
    """An ``edit`` that reverses every reference route (same cells, other order)."""
    coords, offsets = pack_routes([r[::-1] for r in unpack_routes(a["route_coords"], a["route_offsets"])])
    a["route_coords"], a["route_offsets"] = coords.astype(a["route_coords"].dtype), offsets
