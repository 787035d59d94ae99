"""Conformance: bounded interface checks of a user's planner, with a receipt.

``conform(spec, output)`` admits one task of the spec (data loads, reference
qualified), builds the planner of the first seed, and runs:

* ``ordinary_input_isolation`` — the request the planner receives has exactly
  the protocol fields and allowlisted metadata, read-only arrays, nothing equal
  to the reference route or ``c*``; the planner's call leaves the request and
  the runner's task data unchanged;
* ``failure_penalties`` — a failed request is scored as a failure (success
  false, censored cost ``1e6 * c*``, regret 999999), even with a legal route;
* ``absolute_deadlines`` — the planner under an already-spent wall budget, and
  a legal route returned late, both end as ``timeout``;
* ``accumulated_stage_work`` — the planner's totals cover its stage subtotals
  and configured limits have their counters; an under-reported total is refused;
* ``malformed_coordinates`` — float and out-of-bounds routes are stored as
  returned, end ``invalid_path`` and score invalid;
* ``analytic_graph`` — the planner answers a flat 9x9 grid whose optimum is
  known in closed form with a terminal record;
* ``admitted_task`` — one timed request on the admitted task ends with a
  terminal record that is not a protocol or runtime failure.

A passed receipt certifies this bounded interface check only: not device
synchronisation, label validity of a population, or optimality.
"""
from __future__ import annotations

import dataclasses
import math
import time
import traceback

import numpy as np

from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET
from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, elevation_metres, normalise_elevation
from passage_jax.fileio import array_sha256, atomic_write_json
from passage_jax.metrics import score_routes
from passage_jax.protocol.adapters import load_planner
from passage_jax.protocol.contracts import (
    METADATA_ALLOWLIST,
    REQUEST_FIELDS,
    STATUSES,
    BudgetSpec,
    PlanResult,
    ProtocolError,
    normalise_result,
)
from passage_jax.protocol.records import code_hash, package_versions
from passage_jax.protocol.requests import build_request
from passage_jax.run import admission as adm
from passage_jax.run.loop import create_folder, refuse_inside_dataset, spec_and_output
from passage_jax.run.spec import RunSpec
from passage_jax.run.timing import execute

__all__ = ["conform", "analytic_task", "RECEIPT_FORMAT", "SCOPE"]

RECEIPT_FORMAT = "passage-jax-conformance-v1"
SCOPE = ("CPU interface checks of the request/result protocol on one admitted task and an "
         "analytic graph; not device synchronisation, population label validity or "
         "candidate optimality")


class _Wrapped:
    """Planner wrapper for synthetic variants of the user's planner."""

    def __init__(self, fn):
        self.fn = fn

    def raw(self, request):
        return self.fn(request)


def _score(routes, tasks, c_star, ok, refs):
    return score_routes(routes, tasks, np.asarray(c_star, np.float64), np.asarray(ok, bool), refs)


def _check(name, fn):
    try:
        passed, detail = fn()
    except Exception as e:  # noqa: BLE001
        passed, detail = False, {"error": f"{type(e).__name__}: {e}",
                                 "trace": traceback.format_exc()[-1500:]}
    return {"name": name, "passed": bool(passed), "detail": detail}


def analytic_task(objective: str, weight: float, n: int = 9):
    """A flat n x n scene without obstacles, start (0, 0), goal (n-1, 2): every
    model reduces to distance, so c* = 2 * 30 * sqrt(2) + (n - 3) * 30."""
    z = np.full((n, n), 1000.0)
    e = normalise_elevation(z, PASSAGE_CALIBRATION)
    zm = elevation_metres(e, PASSAGE_CALIBRATION)
    route = np.array([(0, 0), (1, 1), (2, 2)] + [(r, 2) for r in range(3, n)], np.int32)
    scene = Scene(id="analytic", resolution=n, split="test", elevation_norm=e, elevation_m=zm,
                  obstacles=np.zeros((n, n), bool), start=(0, 0), goal=(n - 1, 2),
                  routes={(objective, "obstacles"): route},
                  metadata={"resolution": n, "split": "test",
                            "calibration": dict(PASSAGE_CALIBRATION),
                            "solvers": {objective: {"weight": weight}}},
                  file="<analytic>", row=0)
    c_star = 2 * 30.0 * math.sqrt(2.0) + (n - 3) * 30.0
    return scene.task(objective, "obstacles"), c_star


def conform(spec: RunSpec | str, output, admitted: adm.Admitted | None = None) -> dict:
    """Run the checks and write ``<output>/conformance.json``; returns the receipt. The
    output folder is checked as a run's (:func:`passage_jax.run.loop.output_folder`, new
    or empty, outside the dataset root) before anything runs."""
    spec, output = spec_and_output(spec, output)
    one = dataclasses.replace(spec, n_samples=1)
    if admitted is None:
        admitted = adm.admit(one)
    refuse_inside_dataset(output, admitted.root)
    task = admitted.tasks[0]
    c_star = float(admitted.references.c_star[0])
    ref_route = admitted.references.routes[0]
    seed = spec.seeds[0]
    planner = load_planner(spec.inference, spec.inference_format, spec.kwargs_for_seed(seed))
    budget = spec.budget
    captured = {}

    def isolation():
        req = build_request(task, budget, time.monotonic() + 3600.0)
        task_hash = array_sha256(task.elevation_m, task.obstacles, task.scene.elevation_norm)
        req_hash = array_sha256(req.elevation, req.obstacles, req.input_tensor)
        problems = []
        names = tuple(f.name for f in dataclasses.fields(req))
        if names != REQUEST_FIELDS:
            problems.append(f"request fields {names} differ from the protocol")
        if not set(req.metadata) <= set(METADATA_ALLOWLIST):
            problems.append(f"metadata keys {sorted(req.metadata)} beyond the allowlist")
        for n in ("elevation", "obstacles", "input_tensor"):
            if getattr(req, n).flags.writeable:
                problems.append(f"request.{n} is writeable")
            a = getattr(req, n)
            if a.ndim == 2 and a.shape[1] == 2 and np.array_equal(a, ref_route):
                problems.append(f"request.{n} equals the reference route")
        for n in REQUEST_FIELDS:
            v = getattr(req, n)
            if isinstance(v, float) and math.isclose(v, c_star, rel_tol=1e-9):
                problems.append(f"request.{n} equals c*")
        raw = planner.raw(req)
        captured["raw"] = raw
        if array_sha256(req.elevation, req.obstacles, req.input_tensor) != req_hash:
            problems.append("the planner changed its request's arrays")
        if array_sha256(task.elevation_m, task.obstacles, task.scene.elevation_norm) != task_hash:
            problems.append("the runner's task data changed during the call")
        return not problems, {"problems": problems, "fields": list(names),
                              "metadata_keys": sorted(req.metadata)}

    def penalties():
        rec, snap = execute(planner, task, budget)
        route = snap[1] if snap[1] is not None else np.zeros((0, 2), np.int32)
        # the same route scored as a failed request, and a legal reference route
        # under a failed status: both must be failures with the censored cost
        s = _score([route, ref_route, ref_route], [task] * 3, [c_star] * 3,
                   [False, False, True], [ref_route] * 3)
        ok = (not s["success"][0] and not s["success"][1] and bool(s["success"][2])
              and s["regret"][0] == FAILURE_REGRET and s["regret"][1] == FAILURE_REGRET
              and math.isclose(float(s["predicted_cost"][1]), CENSOR_FACTOR * c_star, rel_tol=1e-12))
        return ok, {"planner_status": rec["status"],
                    "failed_regret": float(s["regret"][1]),
                    "failed_predicted_cost": float(s["predicted_cost"][1]), "c_star": c_star}

    def deadlines():
        rec, _ = execute(planner, task, BudgetSpec(wall_time_ms=1e-3))

        def late(r):
            time.sleep(0.03)
            return PlanResult(path=np.asarray(ref_route))

        rec2, _ = execute(_Wrapped(late), task, BudgetSpec(wall_time_ms=5.0))
        ok = rec["status"] == "timeout" and rec2["status"] == "timeout" and rec2["problem"] is None
        return ok, {"planner_status_at_spent_deadline": rec["status"],
                    "planner_returned_ms": rec["returned_ms"],
                    "late_legal_route_status": rec2["status"]}

    def stage_work():
        raw = captured.get("raw")
        problems = []
        if raw is None:
            raw = planner.raw(build_request(task, budget))
        try:
            res = normalise_result(raw)
            missing = [c for lim, c in (("max_expansions", "expansions"),
                                        ("max_queue_operations", "queue_operations"),
                                        ("max_live_states", "live_states"))
                       if getattr(budget, lim) is not None and c not in res.work]
            if missing:
                problems.append(f"configured limits without counters: {missing}")
            work, stages = res.work, res.stage_work
        except ProtocolError as e:
            problems.append(str(e))
            work, stages = None, None

        def under(r):
            return PlanResult(path=np.asarray(ref_route), work={"expansions": 1},
                              stage_work={"primary": {"expansions": 2},
                                          "fallback": {"expansions": 3}})

        rec, _ = execute(_Wrapped(under), task, BudgetSpec())
        if rec["status"] != "runtime_error":
            problems.append("an under-reported total was not refused")
        return not problems, {"problems": problems, "work": work, "stage_work": stages}

    def malformed():
        h, w = task.obstacles.shape
        variants = {
            "float": np.asarray(ref_route, np.float64),
            "out_of_bounds": np.vstack([ref_route, [[h, w - 1]]]),
            "negative": np.vstack([[[-1, 0]], ref_route]),
        }
        out, problems = {}, []
        for name, path in variants.items():
            rec, snap = execute(_Wrapped(lambda r, p=path: PlanResult(path=p)), task, BudgetSpec())
            cand = snap[1] if snap[1] is not None else path
            s = _score([cand], [task], [c_star], [rec["status"] == "ok"], [ref_route])
            out[name] = {"status": rec["status"], "route_format": rec["route_format"],
                         "valid_path": bool(s["valid_path"][0])}
            if rec["status"] != "invalid_path" or s["valid_path"][0]:
                problems.append(name)
        if out["float"]["route_format"] != "float":
            problems.append("float route not flagged")
        return not problems, {"cases": out, "problems": problems}

    def analytic():
        t, cs = analytic_task(task.objective, task.weight)
        rec, snap = execute(planner, t, budget)
        s = _score([snap[1] if snap[1] is not None else np.zeros((0, 2), np.int32)], [t], [cs],
                   [rec["status"] == "ok"], [t.route])
        ok = rec["status"] in STATUSES and rec["status"] != "runtime_error"
        return ok, {"status": rec["status"], "c_star": cs, "route_cost": rec["route_cost"],
                    "regret": float(s["regret"][0]), "error": rec["error"]}

    def admitted_task():
        rec, snap = execute(planner, task, budget)
        ok = rec["status"] in STATUSES and rec["status"] != "runtime_error"
        return ok, {"sample_id": task.id, "status": rec["status"],
                    "latency_ms": rec["latency_ms"], "route_format": rec["route_format"],
                    "error": rec["error"], "work": rec["work"]}

    checks = [
        _check("ordinary_input_isolation", isolation),
        _check("failure_penalties", penalties),
        _check("absolute_deadlines", deadlines),
        _check("accumulated_stage_work", stage_work),
        _check("malformed_coordinates", malformed),
        _check("analytic_graph", analytic),
        _check("admitted_task", admitted_task),
    ]
    receipt = {
        "format": RECEIPT_FORMAT,
        "passed": all(c["passed"] for c in checks),
        "scope": SCOPE,
        "checks": checks,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "seed": seed,
        "planner": admitted.entry,
        "task": {"sample_id": task.id, "c_star": c_star,
                 "shards": admitted.shards, "reference_policy": spec.reference_policy},
        "code": code_hash(),
        "hardware": adm.hardware(),
        "versions": package_versions(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    create_folder(output)
    atomic_write_json(output / "conformance.json", receipt)
    return receipt
