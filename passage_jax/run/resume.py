"""Resuming a run folder: the stored run must be the same run (the differing field is
named otherwise), a finished run is recognised, and completed seeds are verified and,
when a file is torn, rebuilt from their journals."""
from __future__ import annotations

import json
from pathlib import Path

from passage_jax.fileio import read_document, sha256_file, to_json
from passage_jax.protocol.records import tasks_sha256
from passage_jax.protocol.runfolder import (
    JOURNAL,
    LOCK,
    MANIFEST,
    RUN_FILES,
    RUN_STARTED,
    RUN_STARTED_FORMAT,
    RUN_SUMMARY,
    SEED_STATE,
    is_protocol_file,
    remove_temporaries,
    seed_folder_name,
)
from passage_jax.run.context import RunContext
from passage_jax.run.errors import ResumeError
from passage_jax.run.execution import RequestPlan, finish_seed, load_state, save_state
from passage_jax.run.specification import RunSpec

__all__ = ["differences", "refuse_differences", "refuse_other_spec", "stored_run", "finished_summary",
           "seed_problems", "keep_completed_seed"]


def _short(v) -> str:
    t = json.dumps(v, sort_keys=True, default=str)
    return t if len(t) <= 80 else t[:77] + "..."


def differences(stored, now, prefix="") -> list[str]:
    """Dotted paths where two JSON values differ, with both values (shortened)."""
    if isinstance(stored, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(stored) | set(now), key=str):
            if k not in stored or k not in now:
                out.append(f"{prefix}{k}: stored {_short(stored.get(k))}, now {_short(now.get(k))}")
            else:
                out += differences(stored[k], now[k], f"{prefix}{k}.")
        return out
    if isinstance(stored, list) and isinstance(now, list) and len(stored) == len(now) \
            and any(isinstance(x, (dict, list)) for x in stored):
        out = []
        for i, (a, b) in enumerate(zip(stored, now)):
            out += differences(a, b, f"{prefix}{i}.")
        return out
    if stored != now:
        return [f"{prefix.rstrip('.')}: stored {_short(stored)}, now {_short(now)}"]
    return []


def refuse_differences(where: str, what: str, stored, now) -> None:
    """:class:`ResumeError` naming (up to three of) the differences of ``stored`` and ``now``."""
    diffs = differences(stored, now)
    if diffs:
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise ResumeError(f"{where}: {what} differs from the stored run: "
                          + "; ".join(diffs[:3]) + more)


def refuse_other_spec(output: Path, stored: dict, spec: RunSpec) -> None:
    """:class:`ResumeError` when ``spec`` is not the stored run's spec."""
    if stored.get("spec_sha256") != spec.sha256():
        now_spec = json.loads(to_json(spec.to_dict()))
        refuse_differences(str(output / RUN_STARTED), "the spec",
                           {"spec": stored.get("spec")}, {"spec": now_spec})
        raise ResumeError(f"{output / RUN_STARTED}: spec_sha256 {stored.get('spec_sha256')} "
                          f"differs from the spec's {spec.sha256()}")


def stored_run(output: Path) -> dict | None:
    """The stored ``run_started.json`` of a folder to resume, or None when the folder holds
    nothing to resume (missing, empty, or only temporaries of an interrupted write)."""
    if output.exists() and not output.is_dir():
        raise ResumeError(f"{output} exists and is not a folder")
    if not output.is_dir():
        return None
    started = output / RUN_STARTED
    if started.is_file():
        stored = read_document(started, ResumeError, "run record")
        if not isinstance(stored, dict) or stored.get("format") != RUN_STARTED_FORMAT:
            raise ResumeError(f"{started}: not a {RUN_STARTED_FORMAT} record")
        return stored
    entries = [p.name for p in output.iterdir()
               if not (p.name == LOCK or (p.name.startswith(f".{RUN_STARTED}.tmp-"))
                       or is_protocol_file(p.name))]
    if entries:
        raise ResumeError(f"output folder {output} has no {RUN_STARTED} but is not empty "
                          f"({', '.join(sorted(entries)[:5])}); it does not hold a resumable run")
    return None


def seed_problems(folder: Path) -> tuple[dict | None, list[str]]:
    """The manifest of a completed seed folder and what is wrong with its files."""
    try:
        manifest = read_document(folder / MANIFEST, ValueError)
    except (ValueError, OSError) as e:
        return None, [f"{MANIFEST}: {e}"]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None, [f"{MANIFEST}: not a seed manifest"]
    problems = []
    for name in RUN_FILES:
        p = folder / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif sha256_file(p) != manifest["files"].get(name):
            problems.append(f"{name}: sha256 differs from the manifest (torn or changed)")
    return manifest, problems


def finished_summary(output: Path, spec: RunSpec) -> dict | None:
    """``run.json`` of a finished run whose every seed folder verifies, else None."""
    try:
        summary = read_document(output / RUN_SUMMARY, ValueError)
    except ValueError:
        return None
    if not isinstance(summary, dict) or summary.get("spec_sha256") != spec.sha256():
        return None
    for seed in spec.seeds:
        folder = output / seed_folder_name(seed)
        if not folder.is_dir():
            return None
        manifest, problems = seed_problems(folder)
        if manifest is None or problems or manifest.get("seed") != int(seed):
            return None
    return {**summary, "complete": True}


def _refuse_other_seed_run(ctx: RunContext, seed: int, folder: Path, manifest: dict) -> None:
    """:class:`ResumeError` when a completed seed's manifest is not of this run and seed."""
    if manifest.get("seed") != int(seed):
        raise ResumeError(f"{folder / MANIFEST}: seed {manifest.get('seed')} is not {seed}")
    admitted = ctx.admitted
    now = {"spec_sha256": admitted.spec.sha256(), "tasks_sha256": tasks_sha256(admitted),
           "references": admitted.references.identity()}
    stored = {"spec_sha256": manifest.get("spec_sha256"),
              "tasks_sha256": (manifest.get("data") or {}).get("tasks_sha256"),
              "references": (manifest.get("references") or {}).get("identity")}
    refuse_differences(str(folder / MANIFEST), "the completed seed", stored, now)


def keep_completed_seed(ctx: RunContext, seed: int, folder: Path) -> dict:
    """Verify a completed seed folder against the run; rebuild its files from the journal
    when one is torn or missing. Returns its manifest."""
    manifest, problems = seed_problems(folder)
    if manifest is not None:
        _refuse_other_seed_run(ctx, seed, folder, manifest)
    remove_temporaries(folder)
    if not problems:
        return manifest
    if not (folder / JOURNAL).is_file():
        raise ResumeError(f"{folder}: {'; '.join(problems)}, and there is no {JOURNAL} "
                          f"to rebuild it from")
    state = load_state(folder, seed)
    if state is None:
        raise ResumeError(f"{folder}: {'; '.join(problems)}, and {SEED_STATE} is unreadable")
    state = save_state(folder, state.with_repair(problems))
    ctx.say(f"seed {seed}: {'; '.join(problems)}; rebuilding from {JOURNAL}")
    return finish_seed(ctx, seed, folder, state, RequestPlan(ctx.spec, ctx.admitted.tasks.stubs))
