"""The reproducible-entry check (docs/admission.md, "The reproducible-entry check").

An entry is one scored run folder (a row of a results table). It is reproducible when
what is needed to rebuild and re-read it was recorded:

* ``evaluator_commit``: the evaluator's published commit (recorded by the run, from a
  clean work tree, or declared at the test admission gate);
* ``container_digest``: the declared container image digest (``sha256:<64 hex>``);
* ``calibration_decisions``: the decisions frozen on calibration and their canonical sha256;
* ``seeds``: the three training seeds, each seed folder run and scored (``manifest.json``,
  ``metrics.json``, ``per_sample.npz``, ``score_receipt.json``);
* ``checkpoints``: for a learned method, one recorded checkpoint (sha256) per seed;
* ``dataset``: a pinned dataset (a 40-hex revision, or the shards' sha256 recorded);
* ``sidecar``: a complete ``sidecar.json`` (every field of :data:`SIDECAR_FIELDS` present,
  the seeds of the run);
* ``intervals``: seed-replicated paired-bootstrap intervals: a compare (given on the
  command line) of this run whose six-metric comparison ran over the three seeds with
  known geographic blocks.

Before any item is looked at, each run folder is verified as every reader of a run folder
verifies it (:mod:`passage_jax.protocol.runfolder`: nothing but a finished run's listed
contents, no link out of the folder, the identity chain back to ``run_started.json``, the
manifest's hashes); a folder that fails is refused (:class:`EntryError` naming the file),
not listed as an entry.

A green test admission gate (:mod:`passage_jax.run.gate`) is a separate thing: it
says that a test run may proceed; it makes no entry reproducible. This module only reads
what the folders hold; it never imports the runner.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from passage_jax.checks import is_full_commit
from passage_jax.contract import DEFAULT_SEEDS, PRIMARY_METRICS
from passage_jax.protocol.runfolder import (
    MANIFEST,
    METRICS,
    PER_SAMPLE,
    RECEIPT,
    RUN_SUMMARY,
    SEED_FOLDER_GLOB,
    FolderError,
    seed_folder_name,
    verify_run_folder,
)

__all__ = ["ITEMS", "SIDECAR_FIELDS", "EntryError", "check_entries", "format_table", "SEPARATE_FROM_GATE"]

ITEMS = ("evaluator_commit", "container_digest", "calibration_decisions", "seeds", "checkpoints",
         "dataset", "sidecar", "intervals")
#: sidecar fields an entry needs (docs/admission.md): evaluated subset hash, dataset revision or
#: shard hashes, seed set, inference kwargs, calibration hash, hardware, timing settings,
#: precision, evaluator commit and source hash, container digest
SIDECAR_FIELDS = ("evaluated_subset", "dataset", "seeds", "inference_kwargs",
                  "calibration_decisions_sha256", "hardware", "timing", "precision", "evaluator",
                  "evaluator_commit", "container_digest", "metrics")
SEEDED_FILES = (MANIFEST, METRICS, PER_SAMPLE, RECEIPT)
SEPARATE_FROM_GATE = ("A green test admission gate (admit-test) is separate from a reproducible "
                      "entry: the gate says a test run may proceed; this check lists what an entry "
                      "must carry to be rebuilt and re-read.")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class EntryError(ValueError):
    """An argument is neither a run folder nor a compare file (names it)."""


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _item(met: bool, detail: str) -> dict:
    return {"present": bool(met), "detail": detail}


def _manifests(run: Path) -> dict:
    out = {}
    for f in sorted(run.glob(SEED_FOLDER_GLOB)):
        if f.is_dir():
            m = _json(f / MANIFEST)
            out[f.name] = m if isinstance(m, dict) else None
    return out


def _first(manifests: dict) -> dict:
    return next((m for m in manifests.values() if m), {})


def _commit(prov: dict, side: dict | None) -> dict:
    rec = prov.get("evaluator_commit") or (side or {}).get("evaluator_commit")
    adm = prov.get("test_admission") or {}
    if isinstance(rec, dict) and _HEX40.fullmatch(str(rec.get("commit", ""))):
        if not rec.get("dirty"):
            return _item(True, f"commit {rec['commit']} (clean work tree)")
        declared = _declared_commit(adm)
        if declared:
            return _item(True, f"declared commit {declared} at admission (work tree not clean)")
        return _item(False, f"commit {rec['commit']} recorded with uncommitted changes: not a "
                            f"published commit")
    declared = _declared_commit(adm)
    if declared:
        return _item(True, f"declared commit {declared} at admission")
    return _item(False, "no evaluator commit recorded (the run did not come from a git checkout)")


def _declared_commit(adm: dict) -> str | None:
    receipt = adm.get("receipt") if isinstance(adm, dict) else None
    body = _json(Path(receipt)) if receipt else None
    for row in (body or {}).get("conditions", []):
        if row.get("condition") == "evaluator" and row.get("met"):
            d = (row.get("record") or {}).get("declared_commit")
            return d.lower() if isinstance(d, str) and _HEX40.fullmatch(d.lower()) else None
    return None


def _container(prov: dict, side: dict | None) -> dict:
    d = prov.get("container_digest") or (side or {}).get("container_digest")
    if isinstance(d, str) and _DIGEST.fullmatch(d):
        return _item(True, d)
    return _item(False, "no container digest declared (spec container_digest, bench "
                        "--container-digest)")


def _calibration(prov: dict) -> dict:
    cal = prov.get("calibration_decisions")
    if isinstance(cal, dict) and re.fullmatch(r"[0-9a-f]{64}", str(cal.get("canonical_sha256", ""))):
        return _item(True, f"{cal.get('path')} canonical sha256 {cal['canonical_sha256']}")
    return _item(False, "no calibration decisions recorded (spec calibration_decisions)")


def _seeds(run: Path, manifests: dict) -> dict:
    seeds = sorted(m.get("seed") for m in manifests.values() if m and "seed" in m)
    if seeds != sorted(DEFAULT_SEEDS):
        return _item(False, f"seeds {seeds} are not the three training seeds {list(DEFAULT_SEEDS)}")
    missing = [f"{seed_folder_name(s)}/{n}" for s in seeds for n in SEEDED_FILES
               if not (run / seed_folder_name(s) / n).is_file()]
    if missing:
        return _item(False, f"not scored: missing {', '.join(missing[:4])}"
                            + (f" (+{len(missing) - 4})" if len(missing) > 4 else ""))
    return _item(True, f"seeds {seeds}, each run and scored")


def _learned(m0: dict) -> bool:
    spec = m0.get("spec") or {}
    cc = spec.get("component_control") or {}
    return (str(spec.get("family") or "").lower() == "learned" or bool(cc.get("checkpoint_id"))
            or cc.get("guide") == "learned")


def _checkpoints(manifests: dict) -> dict:
    m0 = _first(manifests)
    if not _learned(m0):
        return _item(True, "not a learned method: no checkpoint needed")
    per_seed = {m.get("seed"): m.get("checkpoints") or {} for m in manifests.values() if m}
    missing = [s for s, c in per_seed.items() if not any(isinstance(v, dict) and v.get("sha256")
                                                         for v in c.values())]
    if missing or not per_seed:
        return _item(False, f"learned method: no checkpoint sha256 recorded for seed(s) {missing}")
    return _item(True, f"learned method: checkpoint sha256 recorded for seeds {sorted(per_seed)}")


def _dataset(m0: dict) -> dict:
    data = m0.get("data") or {}
    rev = data.get("dataset_revision")
    if is_full_commit(rev):
        return _item(True, f"{data.get('dataset_repo')} at revision {rev}")
    shards = data.get("shards") or []
    if shards and all(isinstance(s, dict) and s.get("sha256") for s in shards):
        return _item(True, f"local root, {len(shards)} shard sha256 recorded")
    return _item(False, "neither a dataset revision nor shard hashes recorded")


def _sidecar(run: Path, manifests: dict) -> tuple[dict, dict | None]:
    path = run / "sidecar.json"
    side = _json(path) if path.is_file() else None
    if not isinstance(side, dict):
        return _item(False, f"{path}: missing or not JSON (python -m cli bench writes it)"), None
    absent = [k for k in SIDECAR_FIELDS if side.get(k) in (None, {}, [])]
    seeds = sorted(m.get("seed") for m in manifests.values() if m)
    if sorted(side.get("seeds") or []) != seeds:
        absent.append(f"seeds (sidecar {side.get('seeds')}, run {seeds})")
    if absent:
        return _item(False, f"sidecar.json lacks {', '.join(absent)}"), side
    return _item(True, "sidecar.json complete"), side


def _intervals(run: Path, compares: list) -> dict:
    me = run.resolve()
    seen = []
    for path, cmp in compares:
        runs = cmp.get("runs") or {}
        if not any(Path(str((r or {}).get("path", ""))).resolve() == me for r in runs.values()):
            continue
        seen.append(path)
        pc = cmp.get("primary_comparison") or {}
        seeds = sorted(pc.get("seeds") or [])
        if seeds == sorted(DEFAULT_SEEDS) and pc.get("n_bootstrap") and (pc.get("n_blocks") or 0) >= 2 \
                and all(k in (cmp.get("contrasts") or {}) for k in PRIMARY_METRICS):
            return _item(True, f"{path}: seed-mean paired block bootstrap over seeds {seeds}, "
                               f"{pc['n_bootstrap']} draws, {pc['n_blocks']} blocks")
    if seen:
        return _item(False, f"{', '.join(map(str, seen))}: no six-metric comparison over the three "
                            f"seeds with known blocks")
    return _item(False, "no compare of this run given (python -m cli compare; pass its JSON here)")


def _entry(run: Path, compares: list) -> dict:
    manifests = _manifests(run)
    m0 = _first(manifests)
    prov = m0.get("provenance") or {}
    side_item, side = _sidecar(run, manifests)
    items = {
        "evaluator_commit": _commit(prov, side),
        "container_digest": _container(prov, side),
        "calibration_decisions": _calibration(prov),
        "seeds": _seeds(run, manifests),
        "checkpoints": _checkpoints(manifests),
        "dataset": _dataset(m0),
        "sidecar": side_item,
        "intervals": _intervals(run, compares),
    }
    missing = [k for k in ITEMS if not items[k]["present"]]
    return {"run": str(run), "method_name": m0.get("method_name"), "items": items,
            "missing": missing, "reproducible": not missing}


def check_entries(paths) -> dict:
    """The entry table of the run folders and compare files in ``paths`` (a compare adds
    the two runs it names and their intervals). :class:`EntryError` for a path that is
    neither, and for a run folder that fails its verification
    (:func:`~passage_jax.protocol.runfolder.verify_run_folder`)."""
    runs, compares = [], []
    for p in map(Path, paths):
        if p.is_dir():
            if not (p / RUN_SUMMARY).is_file() and not any(p.glob(f"{SEED_FOLDER_GLOB}/{MANIFEST}")):
                raise EntryError(f"{p}: not a run folder (no {RUN_SUMMARY}, no seed-*/{MANIFEST})")
            runs.append(p)
        elif p.is_file():
            cmp = _json(p)
            if not isinstance(cmp, dict) or not isinstance(cmp.get("runs"), dict):
                raise EntryError(f"{p}: not a compare JSON file (no 'runs' block)")
            compares.append((p, cmp))
            for r in cmp["runs"].values():
                rp = Path(str((r or {}).get("path", "")))
                if rp.is_dir():
                    runs.append(rp)
                else:
                    raise EntryError(f"{p}: names run folder {rp}, which does not exist")
        else:
            raise EntryError(f"{p}: no such run folder or compare file")
    unique, seen = [], set()
    for r in runs:
        if r.resolve() not in seen:
            seen.add(r.resolve())
            unique.append(r)
    for r in unique:
        try:
            verify_run_folder(r)
        except FolderError as e:
            raise EntryError(str(e)) from None
    entries = [_entry(r, compares) for r in unique]
    return {"format": "passage-jax-entry-check-v1", "items": list(ITEMS), "entries": entries,
            "compares": [str(p) for p, _ in compares],
            "reproducible": bool(entries) and all(e["reproducible"] for e in entries),
            "statement": SEPARATE_FROM_GATE}


def format_table(result: dict) -> str:
    """The check as a text table: one block per entry, one line per item."""
    lines = []
    width = max(len(i) for i in ITEMS)
    for e in result["entries"]:
        lines.append(f"entry {e['run']} ({e['method_name']}): "
                     f"{'reproducible' if e['reproducible'] else 'missing ' + ', '.join(e['missing'])}")
        for k in ITEMS:
            it = e["items"][k]
            lines.append(f"  {'present' if it['present'] else 'MISSING':<7}  {k:<{width}}  {it['detail']}")
    lines.append(result["statement"])
    return "\n".join(lines)
