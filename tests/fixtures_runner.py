"""Tiny scenes for the protocol/planner/runner tests.

Each scene is a 12x12 grid with start (1, 1) and goal (10, 10) on smooth,
sloping terrain. Kinds:

* ``open``: no obstacles (the greedy walker always arrives);
* ``trap``: an L-shaped obstacle cupping the start-goal diagonal, so the greedy
  walker gets stuck (``no_path``) while search planners go around;
* ``hill``: a steep peak on the diagonal, so the fewest-steps route (over the
  peak) costs more than the optimum (around it).

The released routes are exact: computed with the CPU reference search
(``passage_jax.reference.search.dijkstra``) for every objective and variant.
"""
from __future__ import annotations

import numpy as np

from passage_jax.data.scene import PASSAGE_CALIBRATION, normalise_elevation
from passage_jax.data.writer import write_split
from passage_jax.graph import OBJECTIVES

N = 12
START, GOAL = (1, 1), (N - 2, N - 2)
WEIGHTS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}
KINDS = ("open", "trap", "hill")


def elevation(kind: str, index: int) -> np.ndarray:
    r, c = np.mgrid[0:N, 0:N].astype(np.float64)
    z = 500.0 + 8.0 * r + 5.0 * c + 10.0 * np.sin(0.7 * r + 0.3 * index) * np.cos(0.5 * c)
    if kind == "hill":
        z += 600.0 * np.exp(-((r - 5.5) ** 2 + (c - 5.5) ** 2) / 2.0)
    return z


def obstacles(kind: str) -> np.ndarray:
    o = np.zeros((N, N), bool)
    if kind == "trap":
        o[4, 1:6] = True
        o[1:5, 5] = True
    return o


def make_row(index: int, kind: str, split: str = "test") -> dict:
    from passage_jax.reference.search import dijkstra

    z = elevation(kind, index)
    e = normalise_elevation(z, PASSAGE_CALIBRATION)
    # the loader recomputes metres from float32 e: solve on exactly those metres
    from passage_jax.data.scene import elevation_metres

    zm = elevation_metres(e, PASSAGE_CALIBRATION)
    o = obstacles(kind)
    t = np.zeros((N, N, 3), np.float32)
    t[..., 0] = e
    t[START + (1,)] = 1.0
    t[GOAL + (1,)] = -1.0
    t[..., 2] = o.astype(np.float32)
    routes = {}
    for obj in OBJECTIVES:
        for var in ("free", "obstacles"):
            oo = o if var == "obstacles" else np.zeros_like(o)
            res = dijkstra(zm, oo, START, GOAL, obj, WEIGHTS[obj])
            assert res.status == "ok"
            routes[(obj, var)] = res.route
    md = {
        "index": index, "resolution": N, "split": split,
        "calibration": dict(PASSAGE_CALIBRATION),
        "solvers": {o_: {"weight": WEIGHTS[o_], "solver": "dijkstra", "heuristic": "none"}
                    for o_ in OBJECTIVES},
        "markers": {"start": 1, "goal": -1},
        "tile": {"source": "test", "lat": 36 + index, "lon": -112, "tiles": [[36 + index, -112]]},
        "crop": {"row0": 0, "col0": 0, "rows": N, "cols": N, "cell_size_m": 30.0},
        "source": {"note": "fixture", "secret_route": "never forwarded"},
        "fixture": True,
    }
    return {"id": f"{index:010d}", "tensor": t, "routes": routes, "metadata": md}


def write_cohort(root, kinds=KINDS, split: str = "test") -> list:
    rows = [make_row(i, k, split) for i, k in enumerate(kinds)]
    write_split(root, N, split, rows, rows_per_shard=2)
    return rows


def load(root, objective="elevation", variant="obstacles", split="test"):
    from passage_jax.data import load_tasks

    return load_tasks(root, N, split, objective, variant, n_samples=None)


def spec_dict(root, **over) -> dict:
    d = {
        "method_name": "test", "inference": "passage_jax.planners.bfs:make_planner",
        "resolution": N, "cost_model": "elevation", "split": "test",
        "dataset_path": str(root), "n_samples": None, "seeds": [1234],
        "latency_warmup": 1, "latency_repeats": 2, "quality_repeat_index": 1,
    }
    d.update(over)
    return d


# --------------------------------------------------------------------------- #
# planners used by the runner tests (importable as ``fixtures_runner:<name>``)
# --------------------------------------------------------------------------- #

def straight_plan(request, **kw):
    """A plan callable: the fewest-steps route via the BFS baseline."""
    from passage_jax.planners.bfs import BFSPlanner

    return BFSPlanner().plan(request)


def make_sleepy(sleep_ms: float = 50.0):
    """Factory: a planner that ignores its deadline and sleeps before answering."""
    import time

    from passage_jax.planners.bfs import BFSPlanner

    inner = BFSPlanner()

    def plan(request):
        res = inner.plan(request)  # a legal route, then too slow to hand it back
        time.sleep(sleep_ms / 1000.0)
        return res

    return plan


def make_flaky(fail_ids=("0000000001",)):
    """Factory: raises for the listed scene ids, otherwise plans with BFS."""
    from passage_jax.planners.bfs import BFSPlanner

    inner = BFSPlanner()

    def plan(request):
        if request.sample_id in fail_ids:
            raise RuntimeError(f"boom on {request.sample_id}")
        return inner.plan(request)

    return plan


def make_floaty():
    """Factory: returns the right cells as floats (malformed)."""
    from passage_jax.planners.bfs import BFSPlanner

    inner = BFSPlanner()

    def plan(request):
        res = inner.plan(request)
        res.path = np.asarray(res.path, np.float64)
        return res

    return plan


class LegacyPlanner:
    """A legacy planner with predict_path(scene) (scene: dict of request fields)."""

    def __init__(self, **kw):
        self.seen_keys = None

    def predict_path(self, scene):
        from passage_jax.planners.bfs import BFSPlanner
        from passage_jax.protocol import PlanRequest

        self.seen_keys = sorted(scene)
        fields = {k: scene[k] for k in scene if k != "remaining_wall_ms"}
        return BFSPlanner().plan(PlanRequest(**fields)).path


def edited_copy(src, dest, edit):
    """Copy a scored run, edit each seed's manifest with ``edit(manifest)``, carry the
    edited method name and references identity into the run records (``run.json``,
    ``run_started.json``, which ``score`` checks every seed against), and score it again."""
    import json
    import shutil
    from pathlib import Path

    from passage_jax.evaluate import score_run

    dest = Path(dest)
    shutil.copytree(src, dest)
    for seed in dest.glob("seed-*"):
        m = json.loads((seed / "manifest.json").read_text())
        edit(m)
        (seed / "manifest.json").write_text(json.dumps(m))
    first = json.loads(next(dest.glob("seed-*")).joinpath("manifest.json").read_text())
    for name in ("run.json", "run_started.json"):
        rec = json.loads((dest / name).read_text())
        rec["method_name"] = first["method_name"]
        if "identity" in rec:
            rec["identity"]["references"]["identity"] = first["references"]["identity"]
        (dest / name).write_text(json.dumps(rec))
    score_run(dest, force=True)
    return dest


def renamed_copy(src, dest, name: str):
    """Copy a scored run under the method name ``name``, every file agreeing
    (``bench/forgery.py``: ``renamed_copy``)."""
    return bench_forgery().renamed_copy(src, dest, name)


def bench_forgery():
    """``bench/forgery.py``, the consistent forgeries the hostile probes use too."""
    import importlib.util
    import sys
    from pathlib import Path

    if "bench_forgery" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "bench" / "forgery.py"
        spec = importlib.util.spec_from_file_location("bench_forgery", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_forgery"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_forgery"]
