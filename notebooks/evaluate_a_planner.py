# %% [markdown]
# # Evaluate your own planner on the shipped real terrain
#
# A planner is any callable that takes a `PlanRequest` and returns a
# `PlanResult` (SPEC §6). This example writes one — A* that ignores the terrain
# (`distance` cost model), so it finds short routes that are not cheap ones — and
# takes it through the whole evaluator: a run spec, `run` (admission, reference
# qualification, timed requests), offline `score`, a paired block-bootstrap
# `compare` against the breadth-first baseline, and a Markdown `report` with
# figures. `run` comes from `passage_jax.run` (live execution), the rest from
# `passage_jax.evaluate` (offline evaluation). The same steps are the CLI commands
# `run`, `score`, `compare` and `report`. Runs in well under a minute on a CPU:
#
#     python notebooks/evaluate_a_planner.py [OUTPUT_FOLDER]

# %%
import json
import sys
import tempfile
from pathlib import Path

from passage_jax.evaluate import compare_runs, score_run, write_report
from passage_jax.protocol import PlanResult
from passage_jax.reference import astar
from passage_jax.run import parse_spec, run_spec

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="passage-"))


# %% [markdown]
# ## The planner
#
# `make_planner(**inference_kwargs)` is called once per seed (untimed); the
# returned callable is timed once per request. It reports its search work, so a
# spec could also give it an expansion budget.

# %%
def make_planner(cost_model="distance"):
    def plan(request):
        r = astar(request.elevation, request.obstacles, request.start, request.goal,
                  cost_model, 0.0, max_expansions=request.budget.max_expansions)
        work = {"expansions": r.expansions, "queue_operations": r.queue_operations,
                "live_states": r.live_states}
        return PlanResult(path=r.route if r.route is not None else [],
                          status="ok" if r.status == "ok" else r.status, work=work)
    return plan


# %% [markdown]
# ## Two runs on the same frozen tasks
#
# 64×64 test split of the shipped cohort, `elevation` cost, obstacles, 12 scenes,
# the three training seeds (a classical planner gives the same routes for each).

# %%
common = dict(resolution=64, cost_model="elevation", split="test", task_variant="obstacles",
              n_samples=12, dataset_path="shipped", latency_warmup=1, latency_repeats=1)
specs = {
    "terrain_blind_astar": {"method_name": "terrain_blind_astar",
                            "inference": "__main__:make_planner", **common},
    "bfs": {"method_name": "bfs", "inference": "passage_jax.planners.bfs:make_planner",
            **common},
}
for name, d in specs.items():
    run_spec(parse_spec(d), OUT / name)
    score_run(OUT / name)

# %% [markdown]
# ## Paired comparison and report
#
# Contrasts are `T(A) - T(B)` with percentile intervals over whole geographic
# blocks (the 5° cell of each scene's main tile), the same draws for every seed
# and metric. No p-values are declared, so the result is descriptive
# (`inference_status = "test_not_provided"`).

# %%
compare_runs(OUT / "terrain_blind_astar", OUT / "bfs", OUT / "compare.json",
                   n_resamples=2000)
c = json.loads((OUT / "compare.json").read_text())
for metric, d in c["contrasts"].items():
    ci = (f"[{d['ci_low']:+.4g}, {d['ci_high']:+.4g}]" if d.get("ci_available")
          else "unavailable")
    print(f"{metric:24s} A - B = {d['delta']:+.4g}  95% interval {ci}")
files = write_report(OUT / "compare.json", OUT / "report" / "report.md")
print("report:", files)
