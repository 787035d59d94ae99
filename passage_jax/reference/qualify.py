"""Exact references for tasks and reference qualification (contract §3).

Route legality is :func:`passage_jax.graph.route_problem` (the one host check) and
route cost :func:`passage_jax.graph.route_cost`; value iteration runs through
:func:`passage_jax.reference.vi.solve_batch`, the CPU search through
:mod:`passage_jax.reference.search`.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from passage_jax.fileio import jsonable
from passage_jax.graph import OBJECTIVES, VARIANTS, GraphSpec, route_cost, route_problem
from passage_jax.options import merge_options
from passage_jax.reference.search import astar, dijkstra
from passage_jax.reference.vi import PRECISION_RTOL, solve_batch

__all__ = [
    "POLICIES", "SOLVERS", "TASK_KEYS", "CROSS_CHECK_RTOL", "ReferenceSolution", "Qualification",
    "QualifyOptions",
    "solve_tasks", "qualify_scene", "qualify_scenes", "qualification_failures",
]

POLICIES = ("released_labels", "independent_analytic_reference")
SOLVERS = {"vi": "value_iteration", "astar": "astar", "dijkstra": "dijkstra"}
TASK_KEYS = tuple(f"{o}/{v}" for o in OBJECTIVES for v in VARIANTS)
#: Relative disagreement between the two exact solvers above which a task fails.
CROSS_CHECK_RTOL = 1e-9
FLOAT64_RTOL = PRECISION_RTOL["float64"]
DEFAULT_MAX_SWEEPS = 4096
DEFAULT_BATCH = 256


@dataclasses.dataclass
class ReferenceSolution:
    """Exact solution of one task: ``c_star`` (inf when unreachable, NaN when the
    budget ran out), ``route`` (L, 2) int32 or None, ``status`` ("ok",
    "unreachable", "budget_exhausted"), ``solver`` name and ``work`` (sweeps for
    value iteration, expansions for search)."""

    c_star: float
    route: np.ndarray | None
    status: str
    solver: str
    work: int
    precision: str = "float64"  # the arithmetic that produced c_star (value iteration may pair floats)
    precision_rtol: float = FLOAT64_RTOL


@dataclasses.dataclass
class Qualification:
    """Qualification of one task's reference (contract §3).

    ``censored`` (only with ``censor=True`` in :func:`qualify_scenes`): an exact
    solve of the task ran out of its budget and no other check failed; the task is
    then neither qualified nor a failure; ``censored_by`` names the solver that ran
    out. ``cross_solver`` / ``cross_work`` name the cross-check solve and its work
    (expansions or sweeps) when one ran.
    """

    c_star: float
    route_cost: float | None
    qualified: bool
    reason: str | None
    solver: str
    work: int
    censored: bool = False
    censored_by: str | None = None
    cross_solver: str | None = None
    cross_work: int | None = None
    precision: str = "float64"
    precision_rtol: float = FLOAT64_RTOL

    def to_dict(self) -> dict:
        rc = None if self.route_cost is None else float(self.route_cost)
        cw = None if self.cross_work is None else int(self.cross_work)
        return jsonable({"c_star": float(self.c_star), "route_cost": rc,
                         "qualified": bool(self.qualified), "reason": self.reason,
                         "solver": self.solver, "work": int(self.work),
                         "censored": bool(self.censored), "censored_by": self.censored_by,
                         "cross_solver": self.cross_solver,
                         "cross_work": cw, "precision": self.precision,
                         "precision_rtol": float(self.precision_rtol)})


def _task_model(task):
    return task.objective  # objective names are cost-model names (contract §2)


def _search(task, solver, max_expansions):
    fn = astar if solver == "astar" else dijkstra
    r = fn(task.elevation_m, task.obstacles, task.scene.start, task.scene.goal,
           _task_model(task), task.weight, max_expansions=max_expansions)
    return ReferenceSolution(r.cost, r.route, r.status, SOLVERS[solver], r.expansions)


def solve_tasks(tasks, solver: str = "vi", *, max_expansions=None,
                max_sweeps: int = DEFAULT_MAX_SWEEPS, batch_size: int = DEFAULT_BATCH,
                sharding=None, strategy: str = "sweep",
                precision: str = "auto") -> list[ReferenceSolution]:
    """Exact reference of each task (``passage_jax.data.Task``), in input order.

    ``precision`` selects value iteration's arithmetic (``auto``, ``float64``,
    ``double_float``; see :func:`passage_jax.reference.solve_batch`); each solution
    states the path that produced it and its relative tolerance. The CPU searches are
    float64.

    ``solver="vi"`` batches value iteration over tasks of the same grid size
    (chunks of ``batch_size``; ``max_sweeps`` is the budget); ``"astar"`` and
    ``"dijkstra"`` run the CPU search per task (``max_expansions`` budget). Each chunk
    runs in :func:`~passage_jax.reference.vi.solve_batch`'s calls of stable shapes
    (rungs of one ladder, capped per grid size), so chunks of any sizes, in any number of
    calls of this function, compile at most one kernel per rung (docs/reference.md,
    "Batch shapes").
    """
    if solver not in SOLVERS:
        raise ValueError(f"unknown reference solver {solver!r}; known: {sorted(SOLVERS)}")
    tasks = list(tasks)
    if solver != "vi":
        return [_search(t, solver, max_expansions) for t in tasks]
    out: list[ReferenceSolution | None] = [None] * len(tasks)
    groups = defaultdict(list)
    for i, t in enumerate(tasks):
        groups[np.shape(t.elevation_m)].append(i)
    for idx in groups.values():
        for lo in range(0, len(idx), batch_size):
            chunk = idx[lo:lo + batch_size]
            ts = [tasks[i] for i in chunk]
            try:
                res = solve_batch(
                    np.stack([t.elevation_m for t in ts]), np.stack([t.obstacles for t in ts]),
                    [t.scene.start for t in ts], [t.scene.goal for t in ts],
                    [_task_model(t) for t in ts], [t.weight for t in ts],
                    max_sweeps=max_sweeps, sharding=sharding, strategy=strategy, routes=True,
                    precision=precision)
            except ValueError as e:
                raise ValueError(f"{e} (scene {ts[_failing_item(e)].id})"
                                 if _failing_item(e) is not None else str(e)) from None
            for j, i in enumerate(chunk):
                out[i] = ReferenceSolution(float(res.c_star[j]), res.routes[j], res.status[j],
                                           SOLVERS["vi"], int(res.sweeps[j]), res.precision,
                                           float(res.precision_rtol))
    return out


def _failing_item(e: Exception):
    msg = str(e)
    if msg.startswith("batch item "):
        try:
            return int(msg.split()[2].rstrip(":"))
        except ValueError:
            return None
    return None


def _spec(task) -> GraphSpec:
    return GraphSpec(cost_model=_task_model(task), cost_weight=float(task.weight))


def _qualify(task, sol: ReferenceSolution, policy: str, cross: ReferenceSolution | None,
             censor: bool = False):
    scene = task.scene
    where = f"scene {scene.id} {task.objective}/{task.variant}"
    q = Qualification(sol.c_star, None, False, None, sol.solver, sol.work,
                      cross_solver=None if cross is None else cross.solver,
                      cross_work=None if cross is None else cross.work,
                      precision=sol.precision, precision_rtol=sol.precision_rtol)
    if sol.status == "budget_exhausted":
        q.reason = (f"{where}: the exact solve ({sol.solver}) did not finish within its budget "
                    f"(work {sol.work})")
        if censor:
            q.censored, q.censored_by = True, sol.solver
        return q
    if sol.status == "unreachable":
        q.reason = f"{where}: the goal {scene.goal} is unreachable from the start {scene.start}"
        return q
    cross_censored = censor and cross is not None and cross.status == "budget_exhausted"
    if cross_censored:
        cross = None  # nothing to compare; the remaining checks still run on sol
    if cross is not None:
        if cross.status != sol.status:
            q.reason = (f"{where}: exact solvers disagree: {sol.solver} says {sol.status}, "
                        f"{cross.solver} says {cross.status}")
            return q
        rel = abs(cross.c_star - sol.c_star) / max(abs(sol.c_star), 1e-300)
        if rel > CROSS_CHECK_RTOL:
            q.reason = (f"{where}: exact solvers disagree: {sol.solver} c*={sol.c_star!r}, "
                        f"{cross.solver} c*={cross.c_star!r} (relative {rel:.3g} > "
                        f"{CROSS_CHECK_RTOL:g})")
            return q
    spec = _spec(task)
    if policy == "released_labels":
        route, label = task.route, "released route"
    else:
        route, label = sol.route, f"{sol.solver} route"
    if route is None:
        q.reason = f"{where}: no {label}"
        return q
    problem = route_problem(route, scene.start, scene.goal, task.obstacles,
                            np.shape(task.obstacles))
    if problem is not None:
        q.reason = f"{where}: the {label} is not legal: {problem}"
        return q
    rc = route_cost(route, task.elevation_m, spec)
    q.route_cost = rc
    if not spec.costs_agree(rc, sol.c_star):
        verdict = ("is not optimal" if rc > sol.c_star else
                   "costs less than the exact optimum (the exact solve is wrong)")
        q.reason = (f"{where}: the {label} {verdict} under cost model '{spec.cost_model}' "
                    f"(weight {spec.cost_weight!r}): its cost {rc!r} vs c*={sol.c_star!r}, "
                    f"beyond atol={spec.atol:g} + rtol={spec.rtol:g}*c*")
        return q
    if cross_censored:
        q.censored, q.censored_by = True, q.cross_solver
        q.reason = (f"{where}: censored: the cross-check ({q.cross_solver}) did not finish within "
                    f"its budget (work {q.cross_work}); the reference is unconfirmed")
        return q
    q.qualified = True
    return q


@dataclasses.dataclass(frozen=True)
class QualifyOptions:
    """Settings of :func:`qualify_scenes` (validated here, once).

    policy: one of ``POLICIES``; reference_cohort_id: needed by
    ``"independent_analytic_reference"``; solver: the exact solver of the references
    (``SOLVERS``); max_expansions: the CPU search's budget per task (None: unbounded);
    max_sweeps: value iteration's budget; cross_check: solve every task by the other
    exact solver too; batch_size: value-iteration tasks per batch; sharding: their
    placement; keys: the task keys (``"<objective>/<variant>"``) to qualify, None for
    all of ``TASK_KEYS`` (kept as a tuple); censor: a solve out of its budget censors
    the task instead of failing it; precision: value iteration's arithmetic.
    """

    policy: str = "released_labels"
    reference_cohort_id: str | None = None
    solver: str = "vi"
    max_expansions: int | None = None
    max_sweeps: int = DEFAULT_MAX_SWEEPS
    cross_check: bool = True
    batch_size: int = DEFAULT_BATCH
    sharding: object = None
    keys: tuple | None = None
    censor: bool = False
    precision: str = "auto"

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown reference_policy {self.policy!r}; known: {list(POLICIES)}")
        if self.policy == "independent_analytic_reference" and not self.reference_cohort_id:
            raise ValueError("reference_policy 'independent_analytic_reference' needs a "
                             "reference_cohort_id (it defines a different cohort)")
        keys = TASK_KEYS if self.keys is None else tuple(self.keys)
        unknown = [k for k in keys if k not in TASK_KEYS]
        if unknown:
            raise ValueError(f"unknown task key(s) {unknown}; known: {list(TASK_KEYS)}")
        object.__setattr__(self, "keys", keys)
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown reference solver {self.solver!r}; known: {sorted(SOLVERS)}")

    def solve(self, tasks, solver: str) -> list[ReferenceSolution]:
        """:func:`solve_tasks` of ``tasks`` by ``solver`` with these budgets."""
        return solve_tasks(tasks, solver, max_expansions=self.max_expansions,
                           max_sweeps=self.max_sweeps, batch_size=self.batch_size,
                           sharding=self.sharding, precision=self.precision)


def qualify_scenes(scenes, policy: str | None = None, *, options: QualifyOptions | None = None,
                   **overrides) -> list[dict]:
    """Qualify the tasks of each scene: all 6 (3 objectives x 2 variants), or only
    those named in ``keys`` (``"<objective>/<variant>"``), e.g. the one a run uses.

    The settings are ``options`` (a :class:`QualifyOptions`) with any of its fields as
    keywords on top (``reference_cohort_id``, ``solver="vi"``, ``max_expansions``,
    ``max_sweeps``, ``cross_check=True``, ``batch_size``, ``sharding``, ``keys``,
    ``censor=False``, ``precision="auto"``); ``policy`` (default
    ``"released_labels"``) may also come second, by position. An unknown keyword is a
    TypeError naming it.

    The exact references are solved with ``solver`` (value iteration batched
    over scenes by default); with ``cross_check`` every task is also solved by
    the other exact solver (A* for value iteration, value iteration for a
    search) and a disagreement above ``CROSS_CHECK_RTOL`` relative is itself a
    failure. Returns, per scene, a dict ``"<objective>/<variant>" ->``
    :class:`Qualification`.

    ``censor=False`` (default): a solve that runs out of its budget (``max_sweeps``,
    ``max_expansions``) fails the task. ``censor=True``: it *censors* the task
    instead (``censored=True``, ``qualified=False``, the reason says which solve ran
    out) unless another check fails first: an unreachable goal, a released route that
    is illegal or not optimal against the finished solve. A censored task is neither
    qualified nor a failure; the caller counts it separately.

    Called once per chunk (admission, ``audit``), it compiles no kernel per chunk: the
    value-iteration batches are padded to rungs of one ladder (:func:`solve_tasks`),
    the same for every chunk of a grid size.
    """
    if policy is not None:
        overrides = {**overrides, "policy": policy}
    opts = merge_options(QualifyOptions, options, overrides, "qualify_scenes")
    scenes, keys = list(scenes), opts.keys
    tasks = [s.task(*k.split("/")) for s in scenes for k in keys]
    sols = opts.solve(tasks, opts.solver)
    cross = [None] * len(tasks)
    if opts.cross_check:
        cross = opts.solve(tasks, "astar" if opts.solver == "vi" else "vi")
    out = []
    for i in range(len(scenes)):
        d = {}
        for j, key in enumerate(keys):
            t = i * len(keys) + j
            d[key] = _qualify(tasks[t], sols[t], opts.policy, cross[t], opts.censor)
        out.append(d)
    return out


def qualify_scene(scene, policy: str = "released_labels", max_expansions=None, *,
                  solver: str = "vi", reference_cohort_id=None,
                  max_sweeps: int = DEFAULT_MAX_SWEEPS, cross_check: bool = False) -> dict:
    """Qualify one scene's 6 tasks; see :func:`qualify_scenes`. With
    ``solver="vi"`` the sweep budget is ``max_sweeps``; ``max_expansions``
    bounds the CPU search (``solver="astar"``/``"dijkstra"`` or the cross-check)."""
    return qualify_scenes([scene], policy, reference_cohort_id=reference_cohort_id, solver=solver,
                          max_expansions=max_expansions, max_sweeps=max_sweeps,
                          cross_check=cross_check)[0]


def qualification_failures(qualifications) -> list[str]:
    """Reasons of every task that failed qualification (one list of dicts or one dict)."""
    if isinstance(qualifications, dict):
        qualifications = [qualifications]
    return [q.reason for d in qualifications for q in d.values() if not q.qualified]
