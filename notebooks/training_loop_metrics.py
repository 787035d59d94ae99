# %% [markdown]
# # Training the value-field network, with decoded-path metrics in the loop
#
# `passage_jax.learned.train.train` fits the project's value-field network
# (`ValueFieldNet`, Flax linen) with optax on real-terrain crops with cohort-style
# obstacles and exact value-iteration targets. Every `eval_every` steps, under one
# `jit`, it decodes a route by greedy descent on the predicted field for each
# held-out task, scores it with the SPEC §4 kernels (`score_tasks` on `Route` /
# `TaskArrays` pytrees) and folds it into a `PathMetrics` accumulator: the log shows
# success and regret next to the loss. Here a small network trains briefly on
# 32x32 crops (step 0 is the untrained network), then the shipped 64x64 checkpoint
# is loaded and scored the same way on held-out 64x64 crops. About a minute on a CPU:
#
#     python notebooks/training_loop_metrics.py

# %%
import time

from passage_jax.learned import load_checkpoint, shipped_checkpoint
from passage_jax.learned.data import make_material
from passage_jax.learned.train import TrainConfig, eval_set, evaluate_params, train

t0 = time.perf_counter()

# %% [markdown]
# ## A short training run
#
# The config is the one `python -m cli train --config configs/train_value64.yaml`
# reads, made smaller: 32x32 crops, 160 training tasks, 300 steps.

# %%
config = TrainConfig(name="demo32", resolution=32, n_train=160, n_eval=32, steps=300, batch=16,
                     width=16, dilations=(1, 2, 4, 8, 1), eval_every=100, seed=0)
result = train(config)
print(f"{'step':>5} {'loss':>8} {'success':>8} {'regret median':>14}")
for h in result.history:
    loss = "-" if h["loss"] is None else f"{h['loss']:.4f}"
    print(f"{h['step']:>5} {loss:>8} {h['success_rate']:>8.3f} {h['regret_median']:>14.4g}")
print(f"{result.metrics['param_count']} parameters; data {result.seconds['data']} s, "
      f"training {result.seconds['train']} s")
first, last = result.history[0], result.history[-1]
print(f"greedy success on the held-out crops: {first['success_rate']:.2f} untrained -> "
      f"{last['success_rate']:.2f} after {config.steps} steps")

# %% [markdown]
# (A failed task has regret 999999 (the contract's failure regret), so the regret
# median stays there until more than half of the tasks succeed.)
#
# ## The shipped checkpoint, scored the same way
#
# Held-out 64x64 crops (stream 1 of a seed no shipped checkpoint was trained with,
# never the test split).

# %%
ck = load_checkpoint(shipped_checkpoint(1234))
held_out = make_material(32, 64, seed=99, stream=1)
ev = eval_set(held_out)
m = evaluate_params(ck.module, ck.params, ev)
print(f"shipped value64-1234 ({ck.checkpoint_id[:12]}): success {m['success_rate']:.3f}  "
      f"regret median {m['regret_median']:.4g}")
print(f"done in {time.perf_counter() - t0:.1f} s")
