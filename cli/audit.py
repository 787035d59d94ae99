"""``python -m cli audit``: validate a dataset root and summarise it.

Per resolution and split: scene counts; every scene valid or not (the first error
of each failing scene, naming file, row and id); obstacle coverage and released
route lengths (cells) as min/median/max; the block census under both block rules
of SPEC §5 (computed over the valid scenes of the split); reference qualification
of every valid scene's six tasks (SPEC §3: value iteration cross-checked by A*,
released route legal and optimal). Exit status 0 when every scene validates and
qualifies, 1 when any scene fails either, 2 when the layout itself is wrong
(missing root, resolution or split folder).
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np


def register(parser) -> None:
    parser.add_argument("--dataset-path", required=True, type=Path, help="dataset root")
    parser.add_argument("--resolution", required=True, type=int, nargs="+", metavar="N",
                        help="resolution(s) to audit (folders <N>x<N>)")
    parser.add_argument("--split", nargs="+", default=None, metavar="S",
                        help="split(s) to audit (aliases val, calib accepted; default: all present)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT",
                        help="also write the facts as JSON (atomically)")
    parser.add_argument("--workers", type=int, default=4, help="decode threads (default: %(default)s)")
    parser.add_argument("--no-qualify", dest="qualify", action="store_false",
                        help="skip reference qualification (validation, census and summaries only)")
    parser.add_argument("--max-expansions", type=int, default=None, metavar="K",
                        help="expansion budget of the A* cross-check (default: unbounded)")


def _summary3(values) -> dict | None:
    """min / median / max (NumPy's linear median) or None when empty."""
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())}


def _jsonable(x):
    """NaN/inf -> None; tuples -> lists; numpy scalars -> Python."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _qualify_scene(scene, max_expansions=None) -> dict:
    """{"<objective>/<variant>": Qualification.to_dict()} for one valid scene: value
    iteration, cross-checked by the independent A* (SPEC §3)."""
    from passage_jax.reference import qualify_scene

    return {k: q.to_dict() for k, q in
            qualify_scene(scene, max_expansions=max_expansions, cross_check=True).items()}


def audit_dataset(root, resolutions, splits=None, workers: int = 4, qualify: bool = True,
                  max_expansions=None) -> dict:
    """Scan the dataset and return ``{"scenes": [...], "summary": {...}}``.

    Raises :class:`passage_jax.data.DataError` for layout problems. With ``qualify``
    each valid scene's six references are qualified; its entry gains
    ``"references"`` and failing tasks are listed in ``summary["unqualified"]``.
    """
    from passage_jax.data import DataError, canonical_split, present_splits, scene_summary
    from passage_jax.data.reader import dataset_root, id_places, scan_split
    from passage_jax.graph import OBJECTIVES, VARIANTS
    from passage_jax.stats.blocks import BLOCK_RULES, assign_blocks, block_census

    root = dataset_root(root)

    def on_scene(scene):
        info = scene_summary(scene)
        if qualify:
            info["references"] = _qualify_scene(scene, max_expansions)
        return info

    scenes_out: list[dict] = []
    per_res: dict = {}
    for n in resolutions:
        present = present_splits(root, n)
        if splits is None:
            chosen = present
            if not chosen:
                raise DataError(f"{root / f'{n}x{n}'} holds no split folders")
        else:
            try:
                chosen = list(dict.fromkeys(canonical_split(s) for s in splits))
            except ValueError as e:
                raise DataError(str(e)) from None
        index = id_places(root, n)  # ids over every split folder of the resolution
        per_split = {}
        for split in chosen:
            reports = scan_split(root, n, split, on_scene=on_scene, workers=workers, id_index=index)
            valid = [r for r in reports if r.valid]
            tiles = [r.info["tile"] for r in valid]
            labels = {rule: assign_blocks(tiles, rule) for rule in BLOCK_RULES}
            label_of = {id(r): {rule: labels[rule][i] for rule in BLOCK_RULES}
                        for i, r in enumerate(valid)}
            for r in reports:
                entry = {
                    "id": r.id if isinstance(r.id, str) else (None if r.id is None else repr(r.id)),
                    "resolution": n, "split": split, "file": r.file, "row": r.row,
                    "valid": r.valid, "error": r.error,
                    "blocks": label_of.get(id(r), {rule: None for rule in BLOCK_RULES}),
                }
                if r.valid:
                    entry["obstacle_coverage"] = r.info["obstacle_coverage"]
                    entry["route_cells"] = r.info["route_cells"]
                    entry["markers"] = r.info["markers"]
                    if "references" in r.info:
                        entry["references"] = r.info["references"]
                scenes_out.append(entry)
            route_cells = {
                f"{o}/{v}": _summary3([r.info["route_cells"][f"{o}/{v}"] for r in valid])
                for o in OBJECTIVES for v in VARIANTS
            }
            s = {
                "n_scenes": len(reports),
                "n_valid": len(valid),
                "n_invalid": len(reports) - len(valid),
                "obstacle_coverage": _summary3([r.info["obstacle_coverage"] for r in valid]),
                "route_cells": route_cells,
                "blocks": {rule: block_census(labels[rule]) for rule in BLOCK_RULES},
            }
            if qualify:
                quals = [q for r in valid for q in r.info["references"].values()]
                s["qualification"] = {
                    "n_tasks": len(quals),
                    "n_qualified": sum(bool(q.get("qualified")) for q in quals),
                    "n_scenes_qualified": sum(
                        all(q.get("qualified") for q in r.info["references"].values())
                        for r in valid),
                }
            per_split[split] = s
        per_res[str(n)] = {"splits_present": present, "splits": per_split}
    failing = [{k: e[k] for k in ("id", "resolution", "split", "file", "row", "error")}
               for e in scenes_out if not e["valid"]]
    summary = {
        "dataset_path": str(root),
        "resolutions": per_res,
        "n_scenes": len(scenes_out),
        "n_valid": len(scenes_out) - len(failing),
        "n_invalid": len(failing),
        "all_valid": not failing,
        "failing": failing,
        "reference_qualification": "checked" if qualify else "not run",
        "unqualified": [
            {"id": e["id"], "resolution": e["resolution"], "split": e["split"], "task": k,
             "reason": q.get("reason")}
            for e in scenes_out if e.get("references")
            for k, q in e["references"].items() if not q.get("qualified")
        ],
    }
    return _jsonable({"scenes": scenes_out, "summary": summary})


def write_json_atomic(obj, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _fmt3(s, digits=3, pct=False):
    if s is None:
        return "-"
    f = (lambda v: f"{100 * v:.0f}") if pct else (lambda v: f"{v:.{digits}g}")
    return "/".join(f(s[k]) for k in ("min", "median", "max"))


def print_report(report: dict, console) -> None:
    from rich.table import Table

    from passage_jax.graph import OBJECTIVES, VARIANTS

    res = report["summary"]["resolutions"]
    t = Table(title=f"scenes in {report['summary']['dataset_path']}",
              caption="qualified: reference tasks qualified / tasks (SPEC §3); "
                      "coverage: obstacle share (min/med/max); blocks: count (largest share) "
                      "under main_tile_5deg and union_5deg")
    for col in ("res", "split", "scenes", "valid", "bad", "qualified", "coverage %", "main 5°",
                "union 5°"):
        t.add_column(col, justify="left" if col == "split" else "right", no_wrap=True)
    for n, r in res.items():
        for split, s in r["splits"].items():
            blocks = []
            for rule in ("main_tile_5deg", "union_5deg"):
                c = s["blocks"][rule]
                share = "-" if c["largest_share"] is None else f"{100 * c['largest_share']:.0f}%"
                blocks.append(f"{c['n_blocks']} ({share})")
            q = s.get("qualification")
            qual = "-" if q is None else f"{q['n_qualified']}/{q['n_tasks']}"
            if q is not None and q["n_qualified"] < q["n_tasks"]:
                qual = f"[red]{qual}[/red]"
            t.add_row(n, split, str(s["n_scenes"]), str(s["n_valid"]),
                      f"[red]{s['n_invalid']}[/red]" if s["n_invalid"] else "0", qual,
                      _fmt3(s["obstacle_coverage"], pct=True), *blocks)
    console.print(t)
    t = Table(title="released route length in cells (min/median/max)")
    for col in ("res", "split", "variant", *OBJECTIVES):
        t.add_column(col, justify="right" if col == "res" else "left", no_wrap=True)
    for n, r in res.items():
        for split, s in r["splits"].items():
            for v in VARIANTS:
                t.add_row(n, split, v, *[_fmt3(s["route_cells"][f"{o}/{v}"], digits=6)
                                         for o in OBJECTIVES])
    console.print(t)
    failing = report["summary"]["failing"]
    if failing:
        f = Table(title=f"[red]{len(failing)} scene(s) fail validation[/red]")
        for col in ("id", "res", "split", "first error"):
            f.add_column(col, overflow="fold")
        for e in failing:
            f.add_row(str(e["id"]), str(e["resolution"]), e["split"], e["error"])
        console.print(f)


def main(args) -> int:
    from rich.console import Console

    from passage_jax.data import DataError

    console = Console(width=None if sys.stdout.isatty() else 120)
    try:
        report = audit_dataset(args.dataset_path, args.resolution, args.split, workers=args.workers,
                               qualify=args.qualify, max_expansions=args.max_expansions)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(report, console)
    if args.json is not None:
        write_json_atomic(report, args.json)
        console.print(f"wrote {args.json}")
    failing = report["summary"]["failing"]
    unqualified = report["summary"]["unqualified"]
    for e in failing:
        print(f"invalid scene {e['id']} ({e['resolution']}x{e['resolution']} {e['split']}): "
              f"{e['error']}", file=sys.stderr)
    for e in unqualified:
        print(f"unqualified reference: {e['reason']}", file=sys.stderr)
    return 1 if failing or unqualified else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
