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

In both of the last two, an answer that is not a route result fails: status ``ok``
(or a bare answer) with no route (``None``) or with something that is not integer
``(L, 2)`` cells. A failure status (``no_path``, ...) without a route is a legal
answer, and an integer route that breaks the graph (a gap, an obstacle) is the
planner's quality, not an interface fault. Every failed check states its ``reason``
in its detail (:func:`failure_reason`).

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
from passage_jax.run.admission import Admitted, admit
from passage_jax.run.execution import execute
from passage_jax.run.loop import create_folder, refuse_inside_dataset, spec_and_output
from passage_jax.run.record import hardware
from passage_jax.run.specification import RunSpec

__all__ = ["conform", "analytic_task", "RECEIPT_FORMAT", "SCOPE", "Probe", "CheckResult", "run_checks",
           "check_isolation", "failure_reason"]

RECEIPT_FORMAT = "passage-jax-conformance-v1"
SCOPE = ("CPU interface checks of the request/result protocol on one admitted task and an "
         "analytic graph; not device synchronisation, population label validity or "
         "candidate optimality")


@dataclasses.dataclass(frozen=True)
class Probe:
    """What the checks work on: the built planner, the admitted task with its budget,
    ``c*`` and reference route."""

    planner: object
    task: object
    budget: BudgetSpec
    c_star: float
    ref_route: np.ndarray


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check of the receipt: its name, whether it passed, and what it saw."""

    name: str
    passed: bool
    detail: dict

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": bool(self.passed), "detail": self.detail}


class _Wrapped:
    """Planner wrapper for synthetic variants of the user's planner."""

    def __init__(self, fn):
        self.fn = fn

    def raw(self, request):
        return self.fn(request)


def _score(routes, tasks, c_star, ok, refs):
    return score_routes(routes, tasks, np.asarray(c_star, np.float64), np.asarray(ok, bool), refs)


def _route(snap) -> np.ndarray:
    return snap[1] if snap[1] is not None else np.zeros((0, 2), np.int32)


def _checked(name: str, fn, *args) -> CheckResult:
    """``fn(*args)`` -> ``(passed, detail)`` as a result; an exception fails the check. A
    failed check's detail carries ``reason``: one sentence saying why (the check's own, or
    the exception)."""
    try:
        passed, detail = fn(*args)
    except Exception as e:  # noqa: BLE001
        passed, detail = False, {"error": f"{type(e).__name__}: {e}",
                                 "trace": traceback.format_exc()[-1500:]}
    if not passed and not detail.get("reason"):
        detail = {**detail, "reason": _fallback_reason(detail)}
    return CheckResult(name, bool(passed), detail)


def _fallback_reason(detail: dict) -> str:
    """Why a check failed, from its detail when the check stated no reason."""
    if detail.get("error"):
        return f"the check raised {detail['error']}"
    if detail.get("problems"):
        return "; ".join(map(str, detail["problems"]))
    return "the check's conditions were not met (see its detail)"


def failure_reason(check: dict) -> str | None:
    """The reason of a receipt's check (``None`` when it passed): its ``detail.reason``, or
    one derived from the detail of a receipt written without reasons."""
    if check.get("passed"):
        return None
    detail = check.get("detail") or {}
    return str(detail.get("reason") or _fallback_reason(detail))


def _planner_said(rec: dict) -> str:
    """What a record says the planner did: its status and, when there is one, its error or
    the route's problem."""
    why = rec.get("error") or rec.get("problem")
    return f"{rec['status']}" + (f" ({why})" if why else "")


def _answer_problem(rec: dict) -> str | None:
    """Why a record shows the planner's answer is not a route result: status ``ok`` (or a
    bare answer) with no route or with something that is not integer ``(L, 2)`` cells. A
    stated failure status (``no_path``, ...) with no route is a legal answer."""
    if rec["status"] != "invalid_path" or rec.get("reported_status") not in ("ok", None):
        return None
    fmt = rec.get("route_format")
    if fmt == "none":
        return ("the planner answered status ok with no route (None): return (L, 2) integer "
                "(row, col) cells, or a PlanResult with a failure status such as 'no_path'")
    if fmt != "int":
        return (f"the planner's answer is not a route (route format {fmt!r}: "
                f"{rec.get('problem')}); a route is (L, 2) integer (row, col) cells")
    return None


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


# --------------------------------------------------------------------------- #
# the checks: each ``(probe, ...) -> (passed, detail)``
# --------------------------------------------------------------------------- #

def _request_problems(req, probe: Probe) -> list:
    """What is wrong with the request the planner receives, before it is called."""
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
        if a.ndim == 2 and a.shape[1] == 2 and np.array_equal(a, probe.ref_route):
            problems.append(f"request.{n} equals the reference route")
    for n in REQUEST_FIELDS:
        v = getattr(req, n)
        if isinstance(v, float) and math.isclose(v, probe.c_star, rel_tol=1e-9):
            problems.append(f"request.{n} equals c*")
    return problems


def _isolation(probe: Probe, answers: list):
    """``ordinary_input_isolation``; the planner's raw answer goes into ``answers``."""
    task = probe.task
    req = build_request(task, probe.budget, time.monotonic() + 3600.0)
    task_hash = array_sha256(task.elevation_m, task.obstacles, task.scene.elevation_norm)
    req_hash = array_sha256(req.elevation, req.obstacles, req.input_tensor)
    problems = _request_problems(req, probe)
    answers.append(probe.planner.raw(req))
    if array_sha256(req.elevation, req.obstacles, req.input_tensor) != req_hash:
        problems.append("the planner changed its request's arrays")
    if array_sha256(task.elevation_m, task.obstacles, task.scene.elevation_norm) != task_hash:
        problems.append("the runner's task data changed during the call")
    return not problems, {"problems": problems, "fields": [f.name for f in dataclasses.fields(req)],
                          "metadata_keys": sorted(req.metadata)}


def check_isolation(probe: Probe) -> tuple[CheckResult, object]:
    """The request has exactly the protocol fields and allowlisted metadata, read-only
    arrays, nothing equal to the reference route or c*; the call changes neither the
    request nor the task. Returns the result and the planner's raw answer (None when
    the call did not return)."""
    answers: list = []
    result = _checked("ordinary_input_isolation", _isolation, probe, answers)
    return result, (answers[0] if answers else None)


def _penalties(probe: Probe):
    """The planner's route scored as a failed request, and a legal reference route under
    a failed status: both must be failures with the censored cost."""
    rec, snap = execute(probe.planner, probe.task, probe.budget)
    ref, c_star = probe.ref_route, probe.c_star
    s = _score([_route(snap), ref, ref], [probe.task] * 3, [c_star] * 3,
               [False, False, True], [ref] * 3)
    ok = (not s["success"][0] and not s["success"][1] and bool(s["success"][2])
          and s["regret"][0] == FAILURE_REGRET and s["regret"][1] == FAILURE_REGRET
          and math.isclose(float(s["predicted_cost"][1]), CENSOR_FACTOR * c_star, rel_tol=1e-12))
    reason = None if ok else (
        f"a failed request was not scored as a failure with regret {FAILURE_REGRET:.0f} and cost "
        f"{CENSOR_FACTOR:g}*c* (regret {float(s['regret'][1]):g}, cost "
        f"{float(s['predicted_cost'][1]):g}, c* {c_star:g})")
    return ok, {"reason": reason, "planner_status": rec["status"], "planner_error": rec["error"],
                "failed_regret": float(s["regret"][1]),
                "failed_predicted_cost": float(s["predicted_cost"][1]), "c_star": c_star}


def _deadlines(probe: Probe):
    """The planner under a spent wall budget, and a legal route returned late: both ``timeout``."""
    rec, _ = execute(probe.planner, probe.task, BudgetSpec(wall_time_ms=1e-3))

    def late(r):
        time.sleep(0.03)
        return PlanResult(path=np.asarray(probe.ref_route))

    rec2, _ = execute(_Wrapped(late), probe.task, BudgetSpec(wall_time_ms=5.0))
    ok = rec["status"] == "timeout" and rec2["status"] == "timeout" and rec2["problem"] is None
    reason = None
    if rec["status"] != "timeout":
        reason = f"under a spent deadline the planner's request ended {_planner_said(rec)}, not timeout"
    elif not ok:
        reason = f"a legal route returned late ended {_planner_said(rec2)}, not timeout"
    return ok, {"reason": reason, "planner_status_at_spent_deadline": rec["status"],
                "planner_error": rec["error"],
                "planner_returned_ms": rec["returned_ms"],
                "late_legal_route_status": rec2["status"]}


def _reported_work(raw, budget: BudgetSpec, problems: list):
    """The work and stage work of a raw answer; a configured limit without its counter,
    or a malformed answer, is a problem."""
    try:
        res = normalise_result(raw)
    except ProtocolError as e:
        problems.append(str(e))
        return None, None
    missing = [c for lim, c in (("max_expansions", "expansions"),
                                ("max_queue_operations", "queue_operations"),
                                ("max_live_states", "live_states"))
               if getattr(budget, lim) is not None and c not in res.work]
    if missing:
        problems.append(f"configured limits without counters: {missing}")
    return res.work, res.stage_work


def _stage_work(probe: Probe, raw):
    """The totals cover the stage subtotals and configured limits have their counters;
    an under-reported total is refused."""
    problems: list = []
    if raw is None:
        raw = probe.planner.raw(build_request(probe.task, probe.budget))
    work, stages = _reported_work(raw, probe.budget, problems)

    def under(r):
        return PlanResult(path=np.asarray(probe.ref_route), work={"expansions": 1},
                          stage_work={"primary": {"expansions": 2}, "fallback": {"expansions": 3}})

    rec, _ = execute(_Wrapped(under), probe.task, BudgetSpec())
    if rec["status"] != "runtime_error":
        problems.append("an under-reported total was not refused")
    return not problems, {"reason": "; ".join(problems) or None, "problems": problems,
                          "work": work, "stage_work": stages}


def _malformed(probe: Probe):
    """Float and out-of-bounds routes are stored as returned, end ``invalid_path`` and
    score invalid."""
    task, ref = probe.task, probe.ref_route
    h, w = task.obstacles.shape
    variants = {"float": np.asarray(ref, np.float64), "out_of_bounds": np.vstack([ref, [[h, w - 1]]]),
                "negative": np.vstack([[[-1, 0]], ref])}
    out, problems = {}, []
    for name, path in variants.items():
        rec, snap = execute(_Wrapped(lambda r, p=path: PlanResult(path=p)), task, BudgetSpec())
        cand = snap[1] if snap[1] is not None else path
        s = _score([cand], [task], [probe.c_star], [rec["status"] == "ok"], [ref])
        out[name] = {"status": rec["status"], "route_format": rec["route_format"],
                     "valid_path": bool(s["valid_path"][0])}
        if rec["status"] != "invalid_path" or s["valid_path"][0]:
            problems.append(name)
    if out["float"]["route_format"] != "float":
        problems.append("float route not flagged")
    reason = None if not problems else "; ".join(
        f"{p} route ended {out[p]['status']} (valid {out[p]['valid_path']}), expected invalid_path"
        if p in out else p for p in problems)
    return not problems, {"reason": reason, "cases": out, "problems": problems}


def _terminal(rec) -> tuple[bool, str | None]:
    """Whether a record ends the request properly, and why not: a terminal status other
    than ``runtime_error``, and an answer that is a route result (:func:`_answer_problem`)."""
    if rec["status"] not in STATUSES or rec["status"] == "runtime_error":
        return False, f"the request ended {_planner_said(rec)}"
    problem = _answer_problem(rec)
    return problem is None, problem


def _analytic(probe: Probe):
    """The planner answers a flat 9x9 grid with a known optimum with a terminal record."""
    t, cs = analytic_task(probe.task.objective, probe.task.weight)
    rec, snap = execute(probe.planner, t, probe.budget)
    s = _score([_route(snap)], [t], [cs], [rec["status"] == "ok"], [t.route])
    ok, reason = _terminal(rec)
    return ok, {"reason": reason, "status": rec["status"], "c_star": cs,
                "route_cost": rec["route_cost"], "route_format": rec["route_format"],
                "regret": float(s["regret"][0]), "error": rec["error"]}


def _admitted(probe: Probe):
    """One timed request on the admitted task ends with a terminal record."""
    rec, _ = execute(probe.planner, probe.task, probe.budget)
    ok, reason = _terminal(rec)
    return ok, {"reason": reason, "sample_id": probe.task.id, "status": rec["status"],
                            "latency_ms": rec["latency_ms"], "route_format": rec["route_format"],
                            "error": rec["error"], "work": rec["work"]}


def run_checks(probe: Probe) -> list:
    """Every check on ``probe``, in the receipt's order (the stage-work check reuses the
    isolation check's answer)."""
    isolation, raw = check_isolation(probe)
    return [isolation,
            _checked("failure_penalties", _penalties, probe),
            _checked("absolute_deadlines", _deadlines, probe),
            _checked("accumulated_stage_work", _stage_work, probe, raw),
            _checked("malformed_coordinates", _malformed, probe),
            _checked("analytic_graph", _analytic, probe),
            _checked("admitted_task", _admitted, probe)]


# --------------------------------------------------------------------------- #
# the receipt
# --------------------------------------------------------------------------- #

def _receipt(spec: RunSpec, admitted: Admitted, probe: Probe, seed: int, checks: list) -> dict:
    return {
        "format": RECEIPT_FORMAT,
        "passed": all(c.passed for c in checks),
        "scope": SCOPE,
        "checks": [c.to_dict() for c in checks],
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "seed": seed,
        "planner": admitted.entry,
        "task": {"sample_id": probe.task.id, "c_star": probe.c_star,
                 "shards": admitted.shards, "reference_policy": spec.reference_policy},
        "code": code_hash(),
        "hardware": hardware(),
        "versions": package_versions(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def conform(spec: RunSpec | str, output, admitted: Admitted | None = None) -> dict:
    """Run the checks and write ``<output>/conformance.json``; returns the receipt. The
    output folder is checked as a run's (:func:`passage_jax.run.loop.output_folder`, new
    or empty, outside the dataset root) before anything runs."""
    spec, output = spec_and_output(spec, output)
    if admitted is None:
        admitted = admit(dataclasses.replace(spec, n_samples=1))
    refuse_inside_dataset(output, admitted.root)
    seed = spec.seeds[0]
    planner = load_planner(spec.inference, spec.inference_format, spec.kwargs_for_seed(seed))
    probe = Probe(planner=planner, task=admitted.tasks[0], budget=spec.budget,
                  c_star=float(admitted.references.c_star[0]), ref_route=admitted.references.routes[0])
    receipt = _receipt(spec, admitted, probe, seed, run_checks(probe))
    create_folder(output)
    atomic_write_json(output / "conformance.json", receipt)
    return receipt
