# %% [markdown]
# # Decoded-path metrics inside a Flax training loop
#
# A tiny convolutional network learns a cost-to-go field on small crops of the
# shipped real terrain. Every step, under one `jit`, it decodes a route by
# greedy descent on its own prediction, scores the route with the SPEC §4
# kernels (`score_tasks` on `Route` and `TaskArrays` pytrees, giving a
# `RouteMetrics` pytree) and folds the per-task metrics into a `PathMetrics`
# accumulator carried on device. At the end of each epoch `compute()` gives the
# primary metrics. (A network this small, trained this briefly, does not yet
# give a field good enough for pure greedy descent to reach the goal: expect a
# falling loss with success still at 0 — exactly what the metrics are there to
# show. The exact field, scored the same way, succeeds everywhere.)
# Runs in well under a minute on a CPU:
#
#     python notebooks/training_loop_metrics.py

# %%
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from passage_jax.graph import MODEL_INDEX, MOVES, edge_cost_field_np
from passage_jax.metrics import PathMetrics, Route, TaskArrays, score_tasks
from passage_jax.metrics.fields import descent_direction
from passage_jax.testing import cost_to_go, make_scene

N, N_SCENES, L_MAX, OBJ = 24, 16, 64, "elevation"
t0 = time.perf_counter()
rng = np.random.default_rng(0)

# %% [markdown]
# ## Data: crops of the shipped rasters, exact routes and exact cost-to-go

# %%
scenes = [make_scene(rng, N, f"demo{i}")[0] for i in range(N_SCENES)]
z = np.stack([s.elevation_m for s in scenes])
obst = np.stack([s.obstacles for s in scenes])
starts = np.array([s.start for s in scenes], np.int32)
goals = np.array([s.goal for s in scenes], np.int32)
weight = np.array([s.weight(OBJ) for s in scenes])
cost = np.stack([edge_cost_field_np(s.elevation_m, s.obstacles, OBJ, s.weight(OBJ)) for s in scenes])
v_star = np.stack([cost_to_go(c, s.goal) for s, c in zip(scenes, cost)])
reach = np.isfinite(v_star) & ~obst
c_star = v_star[np.arange(N_SCENES), starts[:, 0], starts[:, 1]]
refs = np.zeros((N_SCENES, L_MAX, 2), np.int32)
ref_len = np.array([len(s.routes[(OBJ, "obstacles")]) for s in scenes], np.int32)
for i, s in enumerate(scenes):
    refs[i, :ref_len[i]] = s.routes[(OBJ, "obstacles")]
scale = np.nanmax(np.where(reach, v_star, np.nan))
target = np.where(reach, v_star / scale, 0.0).astype(np.float32)
inputs = np.stack([(z - z.mean((1, 2), keepdims=True)) / 500.0, obst,
                   np.zeros_like(z)], -1).astype(np.float32)
inputs[np.arange(N_SCENES), goals[:, 0], goals[:, 1], 2] = 1.0


# %% [markdown]
# ## Model, greedy decoder, metrics step

# %%
class ValueNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        for f in (16, 16, 16):
            x = nn.relu(nn.Conv(f, (3, 3))(x))
        return nn.Conv(1, (3, 3))(x)[..., 0]


def decode(v, c, start, goal):
    """Greedy descent on the predicted field, L_MAX cells; stops at the goal."""
    move = descent_direction(v, c)
    moves = jnp.asarray(MOVES)

    def step(pos, _):
        nxt = pos + moves[move[pos[0], pos[1]]]
        nxt = jnp.where(jnp.all(pos == goal), pos, jnp.clip(nxt, 0, N - 1))
        return nxt, nxt

    _, rest = jax.lax.scan(step, start, None, length=L_MAX - 1)
    route = jnp.concatenate([start[None], rest])
    at_goal = jnp.all(route == goal, axis=1)
    length = jnp.where(at_goal.any(), jnp.argmax(at_goal) + 1, L_MAX)
    return route, length


# device copies of the data (float32: the kernels take their dtype from ``z``)
inputs, target, reach, obst, refs, ref_len, starts, goals = map(
    jnp.asarray, (inputs, target, reach, obst, refs, ref_len, starts, goals))
z = jnp.asarray(z, jnp.float32)
weight = jnp.asarray(weight, jnp.float32)
c_star = jnp.asarray(c_star, jnp.float32)

model = ValueNet()
params = model.init(jax.random.PRNGKey(0), inputs[:1])
opt = optax.adam(3e-3)
opt_state = opt.init(params)
cost32 = jnp.asarray(np.where(np.isfinite(cost), cost, np.inf), jnp.float32)
model_index = jnp.full(N_SCENES, MODEL_INDEX[OBJ], jnp.int32)
# every task of the data set, as one pytree with a leading task axis
tasks = TaskArrays(elevation=z, obstacles=obst, start=starts, goal=goals, cost_model=model_index,
                   weight=weight, c_star=c_star)
references = Route(refs, ref_len)


def take(tree, idx):
    """Rows ``idx`` of every leaf of a batched pytree."""
    return jax.tree_util.tree_map(lambda a: a[idx], tree)


@jax.jit
def train_step(params, opt_state, acc, idx):
    x, y, m = inputs[idx], target[idx], reach[idx]

    def loss_fn(p):
        pred = model.apply(p, x)
        return jnp.sum(jnp.where(m, (pred - y) ** 2, 0)) / jnp.sum(m)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state)
    params = optax.apply_updates(params, updates)
    # metrics on the prediction, all on device
    v = model.apply(params, x) * scale
    v = jnp.where(m, v, jnp.inf)
    routes, lengths = jax.vmap(decode)(v, cost32[idx], starts[idx], goals[idx])
    per_task = score_tasks(Route(routes, lengths), take(references, idx), take(tasks, idx))
    return params, opt_state, acc.update(per_task), loss


# %% [markdown]
# Sanity check: greedy descent on the exact cost-to-go recovers optimal routes.

# %%
v_exact = jnp.where(reach, jnp.asarray(v_star, jnp.float32), jnp.inf)
r_ex, l_ex = jax.jit(jax.vmap(decode))(v_exact, cost32, starts, goals)
ex = score_tasks(Route(r_ex, l_ex), references, tasks)
print("exact field: success", float(ex.success.mean()), " max |regret|",
      float(jnp.max(jnp.abs(ex.regret))))

# %% [markdown]
# ## Training with metrics gathered across steps

# %%
BATCH = 8
for epoch in range(80):
    acc = PathMetrics.empty(capacity=256)
    for b in range(0, N_SCENES, BATCH):
        idx = jnp.arange(b, b + BATCH)
        params, opt_state, acc, loss = train_step(params, opt_state, acc, idx)
    if epoch % 20 and epoch != 79:
        continue
    m = jax.device_get(acc.compute())
    print(f"epoch {epoch}: loss {float(loss):.4f}  success {m['success_rate']:.2f}  "
          f"regret median {m['regret_median']:.3g}  assd {m['assd_mean']:.3g}  "
          f"violations {m['obstacle_violation_rate']:.2f}  n={int(m['n_tasks'])}")
print(f"done in {time.perf_counter() - t0:.1f} s")
