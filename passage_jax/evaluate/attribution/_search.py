"""Learned search against plain A* in the attribution table (``report --attribution``).

In ``attribution.attribution_table`` (so ``report --attribution``; not the two-run
table of ``compare``), when one of the scored runs is plain A* — its spec declares
``family: classical`` and ``architecture: astar`` (e.g. ``configs/bounded.yaml``; the
first such run when several are given) — every run gets the learned-search report of
:func:`passage_jax.metrics.search_report` against it (``search`` per row, rendered as
a second table): the per-task expansion ratio (median, mean, geometric mean; Neural
A*'s Exp), the share of optimal routes, the mean cost excess over successes, the
success rate and the median latency beside A*'s, over all tasks and over TransPath's
hard subset (c* / octile lower bound >= 1.05).
The per-task inputs are read from each seed folder: the quality rows of
``per_sample.npz`` (reference-qualified rows only: ``success``, ``predicted_cost``,
``oracle_cost`` = c*, ``latency_ms``), each row's total ``work.expansions`` from its
record in ``requests.jsonl`` (``record_index``; the stage sum where only
``stage_work`` reports it), and start and goal from ``references.npz``, from which the
octile lower bound is computed: octile distance x :data:`PIXEL_SIZE_M`, i.e. with the
per-metre scale 1 that every registered cost model with a non-negative weight admits
(the scene's grid is not re-read, so the crop's own smallest step cost per metre, >= 1,
which ``bench/learned.py`` uses, is not applied: the bound here is looser or equal and
the hard subset a superset or equal). Tasks are paired by ``sample_id``; a run's seed is
paired with the A* run's seed of the same number, else with A*'s first seed (A* is
deterministic); the seeds' tasks are pooled (unlike the seed means of the main table).
Tasks A* did not plan are counted (``n_unpaired``) and left out; when a row of the run
does not report expansions, the ratio figures are ``n/a`` with the reason.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from passage_jax.evaluate.score import Score, ScoreError, load_npz
from passage_jax.graph import GraphSpec
from passage_jax.metrics.search_report import octile_lower_bound, search_report
from passage_jax.protocol.records import read_requests
from passage_jax.protocol.runfolder import PER_SAMPLE, REFERENCES, REQUESTS

__all__ = ["ASTAR_REFERENCE", "PIXEL_SIZE_M", "SearchInputError", "is_astar_reference", "search_inputs",
           "search_figures"]

#: the spec fields that mark a run as the plain A* reference of the learned-search table
ASTAR_REFERENCE = {"family": "classical", "architecture": "astar"}
#: the grid step of every request: the contract's (:class:`passage_jax.graph.GraphSpec`)
PIXEL_SIZE_M = GraphSpec().pixel_size_m
#: the ratio figures, n/a when a row of the run does not report expansions
_RATIO_FIGURES = ("n_ratio", "n_excluded_astar_zero", "n_excluded_astar_failed", "n_ratio_zero",
                  "ratio_median", "ratio_mean", "ratio_geomean", "exp_reduction_pct",
                  "exp_reduction_geomean_pct")


class SearchInputError(RuntimeError):
    """A scored seed folder's per-task search inputs cannot be read."""


def _expansions_of(rec: dict) -> float:
    """A record's total expansions: ``work.expansions``, else the sum over its
    ``stage_work`` when every stage reports it; NaN when not reported."""
    w = rec.get("work") if isinstance(rec.get("work"), dict) else {}
    if w.get("expansions") is not None:
        return float(w["expansions"])
    sw = rec.get("stage_work") if isinstance(rec.get("stage_work"), dict) else {}
    vals = [(v or {}).get("expansions") for v in sw.values()]
    if vals and all(v is not None for v in vals):
        return float(sum(vals))
    return math.nan


def search_inputs(folder, score: Score) -> dict:
    """The per-task inputs of the learned-search report of one scored seed folder
    (``score`` = its :func:`load_score`): over the quality rows whose reference is
    qualified, ``sample_id``, ``success``, ``cost`` (``predicted_cost``), ``c_star``
    (``oracle_cost``), ``wall_ms`` (``latency_ms``), ``expansions`` (the record's
    total, NaN where not reported) and ``lower_bound`` (the octile bound from
    ``references.npz``'s start and goal, :data:`PIXEL_SIZE_M`, scale 1)."""
    folder = Path(folder)
    per = score.per_sample
    q = np.asarray(per["primary_quality"], bool) & np.asarray(per["reference_qualified"], bool)
    try:
        records = {int(r["record"]): r for r in read_requests(folder / REQUESTS)}
        refs = load_npz(folder / REFERENCES)
    except (OSError, ValueError, KeyError, TypeError, ScoreError) as e:
        raise SearchInputError(f"{folder}: cannot read the per-task search inputs: {e}") from None
    rec_idx = np.asarray(per["record_index"], np.int64)[q]
    task_idx = np.asarray(per["task_index"], np.int64)[q]
    missing = [int(i) for i in rec_idx if int(i) not in records]
    if missing:
        raise SearchInputError(f"{folder / REQUESTS}: no record {missing[0]} of {PER_SAMPLE}")
    if "start" not in refs or "goal" not in refs:
        raise SearchInputError(f"{folder / REFERENCES}: no start/goal arrays")
    start, goal = np.asarray(refs["start"]), np.asarray(refs["goal"])
    return {
        "sample_id": [str(x) for x in np.asarray(per["sample_id"])[q]],
        "success": np.asarray(per["success"], bool)[q],
        "cost": np.asarray(per["predicted_cost"], np.float64)[q],
        "c_star": np.asarray(per["oracle_cost"], np.float64)[q],
        "wall_ms": np.asarray(per["latency_ms"], np.float64)[q],
        "expansions": np.array([_expansions_of(records[int(i)]) for i in rec_idx], np.float64),
        "lower_bound": octile_lower_bound(start[task_idx], goal[task_idx], PIXEL_SIZE_M),
    }


def is_astar_reference(entry: dict) -> bool:
    """Whether a :func:`run_entry` row is plain A*: its spec declares
    :data:`ASTAR_REFERENCE` (``family: classical``, ``architecture: astar``)."""
    return all(entry.get(k) == v for k, v in ASTAR_REFERENCE.items())


def search_figures(entry: dict, reference: dict | None) -> dict:
    """The learned-search report of ``entry`` against the plain A* row ``reference``
    (both :func:`run_entry` rows built with ``search=True``; see the module text):
    ``{"reference", "n_unpaired", "ratio_note", "hard_rule", "n_hard", "all", "hard"}``,
    or ``{"reference": None, "note": why}`` when there is no reference."""
    if reference is None:
        return {"reference": None,
                "note": "no scored run is plain A* (family: classical, architecture: astar)"}
    ref_seeds = reference.get("_search") or {}
    if not ref_seeds:
        return {"reference": reference["name"], "note": "the plain A* run has no per-task inputs"}
    cols = {k: [] for k in ("expansions", "astar_expansions", "cost", "c_star", "success",
                            "lower_bound", "wall_ms", "astar_wall_ms", "astar_success")}
    unpaired = 0
    for seed, mine in (entry.get("_search") or {}).items():
        a = ref_seeds.get(seed) or next(iter(ref_seeds.values()))
        where = {sid: i for i, sid in enumerate(a["sample_id"])}
        pick = [i for i, sid in enumerate(mine["sample_id"]) if sid in where]
        unpaired += len(mine["sample_id"]) - len(pick)
        at = [where[mine["sample_id"][i]] for i in pick]
        for k in ("expansions", "cost", "c_star", "success", "lower_bound", "wall_ms"):
            cols[k].append(np.asarray(mine[k])[pick])
        a_exp = np.asarray(a["expansions"])[at]
        # A* that failed has no ratio; unreported A* expansions count as zero (left out too)
        cols["astar_expansions"].append(np.where(np.isfinite(a_exp), a_exp, 0.0))
        cols["astar_wall_ms"].append(np.asarray(a["wall_ms"])[at])
        cols["astar_success"].append(np.asarray(a["success"], bool)[at])
    v = {k: np.concatenate(x) if x else np.zeros(0) for k, x in cols.items()}
    exp = v["expansions"]
    note = None
    if exp.size and not np.all(np.isfinite(exp)):
        note = f"n/a: {int((~np.isfinite(exp)).sum())} of {exp.size} rows report no expansions"
        exp = np.where(np.isfinite(exp), exp, 0.0)
    procedure = {"expansions": exp, "cost": v["cost"], "c_star": v["c_star"],
                 "success": v["success"].astype(bool), "wall_ms": v["wall_ms"]}
    astar = {"expansions": v["astar_expansions"], "success": v["astar_success"].astype(bool),
             "wall_ms": v["astar_wall_ms"]}
    rep = search_report(procedure, astar, lower_bound=v["lower_bound"])
    if note:
        for sub in ("all", "hard"):
            rep[sub].update({k: None for k in _RATIO_FIGURES})
    return {"reference": reference["name"], "n_unpaired": unpaired, "ratio_note": note, **rep}
