"""The resolved protocol of a launch: ``resolved_protocol.json`` (docs/runner.md,
"Resolved protocol").

Every ``run`` launch (a new run, each resume, and ``run --dry-run``) writes into the
output folder ``resolved_protocol.<n>.json`` (``n`` = 0, 1, ... in launch order) and
``resolved_protocol.json`` (a copy of the latest launch), both atomically. A record
holds the resolved spec, the inference protocol and its canonical flag, the sha256 of
the evaluator's source tree and of the spec file, the checkpoint files with their
sha256, the launcher's argv and the resolved command, the UTC time, package versions
and the devices. It documents the launch; no other output depends on it.

The inference protocol is read from the spec's ``inference_kwargs`` (per seed): the
keys ``tile``, ``stride``, ``hflip``, ``blend``, ``stitch`` (at the top level or
inside a ``tiling`` mapping). None present is whole-scene inference (no tiling),
canonical. A tile size makes it tiled inference, canonical exactly under
:data:`CANONICAL_TILED` (an even tile, stride = tile / 2, hflip on, Hann blend, fields
stitched; the name of any other tiled setting is ``passage_jax_tiled_v1_noncanonical``);
any other setting is noncanonical and the launch prints :data:`NONCANONICAL_MARKER`.
"""
from __future__ import annotations

import platform
import re
import shlex
import sys
from pathlib import Path

import jax

from passage_jax.checks import is_int
from passage_jax.fileio import atomic_write_json, jsonable, sha256_file, utc_now
from passage_jax.protocol.records import code_hash, package_versions
from passage_jax.protocol.runfolder import RESOLVED_PROTOCOL, launch_record_name
from passage_jax.run.specification import RunSpec

__all__ = ["inference_protocol", "run_protocol", "resolved_protocol", "write_resolved_protocol",
           "launch_index", "is_protocol_file", "RESOLVED_PROTOCOL_FORMAT",
           "NONCANONICAL_MARKER", "CANONICAL_TILED", "WHOLE_SCENE", "TILING_KEYS"]

RESOLVED_PROTOCOL_FORMAT = "passage-jax-resolved-protocol-v1"
NONCANONICAL_MARKER = "NONCANONICAL_EVALUATION_PROTOCOL"
#: name of the canonical tiled protocol
CANONICAL_TILED = "passage_jax_tiled_v1"
WHOLE_SCENE = "whole-scene (no tiling)"
TILING_KEYS = ("tile", "stride", "hflip", "blend", "stitch")
#: a launch record's name, its index captured
_LAUNCH_FILE = re.compile("^" + re.escape(launch_record_name(0)).replace("0", r"(\d+)") + "$")
_VERSIONS = ("jax", "jaxlib", "flax", "numpy")


def _tiling_settings(kwargs: dict) -> dict:
    nested = kwargs.get("tiling")
    src = dict(nested) if isinstance(nested, dict) else {}
    src.update({k: kwargs[k] for k in TILING_KEYS if k in kwargs})
    return {k: src[k] for k in TILING_KEYS if k in src}


def inference_protocol(kwargs: dict) -> dict:
    """The inference protocol resolved from one seed's ``inference_kwargs``:
    ``{name, settings, canonical, deviations}``."""
    given = _tiling_settings(kwargs or {})
    if not given or given.get("tile") is None:
        stray = [f"{k}={given[k]!r} without a tile" for k in given if k != "tile"]
        return {"name": WHOLE_SCENE, "settings": {"tiling": None}, "canonical": not stray,
                "deviations": stray}
    tile = given["tile"]
    settings = {"tile": tile, "stride": given.get("stride"), "hflip": given.get("hflip", True),
                "blend": given.get("blend", "hann"), "stitch": given.get("stitch", "fields")}
    canonical_stride = tile // 2 if is_int(tile) else None
    if settings["stride"] is None:
        settings["stride"] = canonical_stride
    want = {"stride": canonical_stride, "hflip": True, "blend": "hann", "stitch": "fields"}
    deviations = [f"{k}={settings[k]!r} (canonical {v!r})" for k, v in want.items()
                  if settings[k] != v]
    if canonical_stride is None or tile % 2:
        deviations.insert(0, f"tile={tile!r} (canonical: an even tile size)")
    canonical = not deviations
    return {"name": CANONICAL_TILED + ("" if canonical else "_noncanonical"), "settings": settings,
            "canonical": canonical, "deviations": deviations}


def run_protocol(spec: RunSpec) -> dict:
    """The inference protocol of the whole run: one seed's protocol when every seed
    resolves the same one, else ``name: "per seed"`` with ``per_seed`` and canonical
    only when every seed is."""
    per = {str(s): inference_protocol(spec.kwargs_for_seed(s)) for s in spec.seeds}
    first = next(iter(per.values()))
    if all(p == first for p in per.values()):
        return dict(first)
    return {"name": "per seed", "settings": None,
            "canonical": all(p["canonical"] for p in per.values()),
            "deviations": sorted({d for p in per.values() for d in p["deviations"]}),
            "per_seed": per}


def is_protocol_file(name: str) -> bool:
    """Whether a file name is a resolved-protocol record (or a temporary of one)."""
    base = name.lstrip(".").split(".tmp-")[0]
    return base == RESOLVED_PROTOCOL or bool(_LAUNCH_FILE.match(base))


def launch_index(output) -> int:
    """The index of the next launch in ``output`` (0 for the first)."""
    output = Path(output)
    if not output.is_dir():
        return 0
    found = [int(m.group(1)) for p in output.iterdir() if (m := _LAUNCH_FILE.match(p.name))]
    return max(found, default=-1) + 1


def _versions() -> dict:
    pkgs = package_versions()
    out = {"python": platform.python_version()}
    for name in _VERSIONS:
        out[name] = pkgs.get(name)
    return out


def _spec_file(spec: RunSpec) -> dict | None:
    p = Path(spec.source)
    if spec.source.startswith("<") or not p.is_file():
        return None
    return {"path": str(p.resolve()), "sha256": sha256_file(p)}


def resolved_protocol(spec: RunSpec, output, *, kind: str, checkpoints: dict | None = None,
                      device=None, index: int = 0, code: dict | None = None) -> dict:
    """The record of one launch (``kind``: ``run``, ``resume`` or ``dry_run``); ``code`` is
    the launch's :func:`code_hash` when the caller has it already."""
    output = Path(output)
    spec_file = _spec_file(spec)
    command = ["python", "-m", "cli", "run", "--spec", spec_file["path"] if spec_file else spec.source,
               "--output", str(output.resolve())]
    if kind == "resume":
        command.append("--resume")
    elif kind == "dry_run":
        command.append("--dry-run")
    return jsonable({
        "format": RESOLVED_PROTOCOL_FORMAT,
        "launch": {"index": int(index), "kind": kind, "utc": utc_now(), "argv": list(sys.argv),
                   "command": shlex.join(command), "output": str(output.resolve())},
        "method_name": spec.method_name,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "spec_file": spec_file,
        "inference_protocol": run_protocol(spec),
        "code": code or code_hash(),
        "checkpoints": checkpoints or {},
        "versions": _versions(),
        "devices": [str(d) for d in jax.devices()],
        "selected_device": None if device is None else str(device),
    })


def write_resolved_protocol(spec: RunSpec, output, *, kind: str, checkpoints: dict | None = None,
                            device=None, log=None, code: dict | None = None) -> dict:
    """Write this launch's record into ``output`` (``resolved_protocol.<n>.json`` and
    ``resolved_protocol.json``) and announce a noncanonical protocol
    (:data:`NONCANONICAL_MARKER`, through ``log`` or on stderr). Returns the record."""
    output = Path(output)
    index = launch_index(output)
    rec = resolved_protocol(spec, output, kind=kind, checkpoints=checkpoints, device=device,
                            index=index, code=code)
    atomic_write_json(output / launch_record_name(index), rec)
    atomic_write_json(output / RESOLVED_PROTOCOL, rec)
    proto = rec["inference_protocol"]
    if not proto["canonical"]:
        msg = (f"{NONCANONICAL_MARKER}: {spec.method_name}: inference protocol {proto['name']!r} "
               f"({'; '.join(proto['deviations'])}); recorded as noncanonical")
        if log is not None:
            log(msg)
        else:
            print(msg, file=sys.stderr)
    return rec
