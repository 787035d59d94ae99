"""The files of a finished seed, built from its journal: ``requests.jsonl``,
``paths.npz``, ``references.npz`` and ``manifest.json`` (formats in
:mod:`passage_jax.protocol.records` and ``docs/runner.md``).

The journal is read entry by entry (three passes: the records and the route sizes,
the route cells, the raw values of malformed routes), so memory stays bounded
whatever the number of records.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from passage_jax import fileio
from passage_jax.data.strata import SCENE_STRATIFIERS
from passage_jax.fileio import atomic_write_bytes, atomic_write_json, fsync_dir, sha256_file
from passage_jax.protocol.records import REFERENCES_FORMAT, PathsWriter, pack_routes
from passage_jax.protocol.runfolder import JOURNAL, MANIFEST, PATHS, REFERENCES, REQUESTS, RUN_FILES
from passage_jax.run.context import RunContext
from passage_jax.run.errors import ResumeError
from passage_jax.run.record.folder import remove_temporaries
from passage_jax.run.record.journal import JournalError, scan_journal
from passage_jax.run.record.manifest import SeedFiles, seed_manifest
from passage_jax.run.record.seed_state import SeedState
from passage_jax.run.specification import RequestPlan, check_entry

__all__ = ["references_arrays", "references_npz", "clear_leftovers", "finish_seed"]

#: the files of a finished seed that the manifest hashes (built from the journal)


def clear_leftovers(folder: Path) -> None:
    """Remove what a killed run may have left in a seed folder in progress: final files
    (rebuilt from the journal) and temporary files of interrupted atomic writes."""
    remove_temporaries(folder)
    for name in (*RUN_FILES, MANIFEST):
        (folder / name).unlink(missing_ok=True)


def references_arrays(admitted) -> dict:
    """The arrays of ``references.npz`` (from the compact task facts: no grids are read).
    Route cells are stored as int16 when the grid fits (every reference and released
    route is a legal in-grid route); readers widen them to int32."""
    refs, stubs = admitted.references, admitted.tasks.stubs
    cell = np.int16 if admitted.spec.resolution <= np.iinfo(np.int16).max else np.int32
    coords, offsets = pack_routes(refs.routes)
    rel_coords, rel_offsets = pack_routes([t.route for t in stubs])
    n = len(stubs)
    tiles = [json.dumps(t.tile, sort_keys=True) if t.tile is not None else "" for t in stubs]
    return {
        "format": np.array(REFERENCES_FORMAT),
        "policy": np.array(refs.policy),
        "cohort_id": np.array(refs.cohort_id or ""),
        "identity": np.array(refs.identity()),
        "precision": np.array(refs.precision),
        "precision_rtol": np.array(refs.precision_rtol, np.float64),
        "resolution": np.array(admitted.spec.resolution, np.int64),
        "split": np.array(admitted.spec.split),
        "task_index": np.arange(n, dtype=np.int64),
        "sample_id": np.asarray(refs.sample_id, dtype=str),
        "objective": np.asarray([t.objective for t in stubs], dtype=str),
        "variant": np.asarray([t.variant for t in stubs], dtype=str),
        "cost_weight": np.asarray([t.weight for t in stubs], np.float64),
        "start": np.asarray([t.start for t in stubs], np.int32).reshape(n, 2),
        "goal": np.asarray([t.goal for t in stubs], np.int32).reshape(n, 2),
        "c_star": refs.c_star,
        "qualified": refs.qualified,
        "released_cost": refs.released_cost,
        "solver": np.asarray(refs.solver, dtype=str),
        "reason": np.asarray(refs.reason, dtype=str),
        "solver_work": refs.work,
        "route_coords": coords.astype(cell),
        "route_offsets": offsets,
        "released_coords": rel_coords.astype(cell),
        "released_offsets": rel_offsets,
        "input_sha256": np.asarray(admitted.input_hashes(), dtype=str),
        "tile_json": np.asarray(tiles, dtype=str),
        **_strata_members(refs),
    }


def references_npz(admitted) -> bytes:
    """``references.npz`` of the run (:func:`references_arrays`, compressed): the same for
    every seed, so built once per admission and kept on it."""
    kept = getattr(admitted, "_references_npz", None)
    if kept is None:
        kept = admitted._references_npz = fileio.npz_bytes(references_arrays(admitted))
    return kept


def _strata_members(refs) -> dict:
    """The scene stratifiers admission measured (``scene_strata`` and their names), or
    nothing when the references carry none."""
    if refs.scene_strata is None:
        return {}
    return {"scene_strata": np.asarray(refs.scene_strata, np.float64),
            "scene_strata_fields": np.asarray(SCENE_STRATIFIERS, dtype=str)}


def finish_seed(ctx: RunContext, seed: int, folder: Path, state: SeedState) -> dict:
    """Build the seed's files from its journal (which must be complete) and its manifest;
    returns the manifest."""
    admitted = ctx.admitted
    admitted.tasks.release()
    rows = RequestPlan(ctx.spec, admitted.tasks.stubs)
    jpath = folder / JOURNAL
    try:
        sizes, counts, batches = _write_requests(folder, jpath, rows, seed)
        sizes.write_streamed(folder / PATHS, lambda visit: scan_journal(jpath, visit))
    except (OSError, JournalError) as e:
        raise ResumeError(f"{jpath}: cannot read the record journal: {e}") from None
    atomic_write_bytes(folder / REFERENCES, references_npz(admitted))
    made = SeedFiles(n_records=len(rows), status_counts=counts, batches=batches,
                     files={name: sha256_file(folder / name) for name in RUN_FILES}, journal=jpath)
    manifest = seed_manifest(ctx, seed, state, made)
    atomic_write_json(folder / MANIFEST, manifest)
    fsync_dir(folder)
    return manifest


def _write_requests(folder: Path, jpath: Path, rows: RequestPlan, seed: int
                    ) -> tuple[PathsWriter, dict, dict]:
    """Write ``requests.jsonl`` from the journal (each entry checked against the request it
    stands for); returns the route sizes (no cells are kept), the status counts per
    series and the batched procedure's batches ({first record: (batch_ms, live scenes)};
    empty for any other profile)."""
    sizes = PathsWriter()
    counts: dict = {}
    batches: dict = {}

    def visit(out):
        def one(i, line, snap):
            rows.check_count(i, jpath)
            rec = json.loads(line)
            check_entry(rec, i, seed, rows[i], jpath)
            fmt, route, raw, desc = snap
            sizes.add_sizes(fmt, 0 if route is None else len(route), 0 if raw is None else len(raw),
                            desc)
            out.write(line.encode("utf-8") + b"\n")
            counts.setdefault(rec["series"], {}).setdefault(rec["status"], 0)
            counts[rec["series"]][rec["status"]] += 1
            if rec.get("batch_first") is not None:
                batches[rec["batch_first"]] = (rec["batch_ms"], rec["batch_live"])
        return one

    with fileio.atomic_file(folder / REQUESTS) as out:
        scan = scan_journal(jpath, visit(out))
        if scan.torn is not None or scan.count != len(rows):
            raise ResumeError(f"{jpath}: {scan.count} complete entries (torn: {scan.torn}) "
                              f"for a seed of {len(rows)} requests")
    return sizes, counts, batches
