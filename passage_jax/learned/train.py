"""Training the value-field network with optax, with decoded-path metrics in the log.

:func:`train` draws training and held-out material
(:func:`~passage_jax.learned.data.make_material`: real-terrain crops, cohort-style
obstacles, exact value-iteration targets), then runs a jitted step: a random
dihedral transform of the batch (the 8-connected grid and every cost model are
invariant under rotations and reflections of the whole crop), the inputs built on
device by :func:`~passage_jax.learned.model.feature_grid`, and adam with a warmup +
cosine schedule (gradients clipped to norm 1) on, over the free reachable cells other
than the goal,

* the squared error of ``u = log(cost-to-go / (octile * pixel))``, plus
* ``move_loss_weight`` times the greedy-choice term (``move_loss="choice"``): the
  cross-entropy of the exact descent move (``descent_direction`` of the exact
  field) under ``softmax(-(C[k] + h(next_k)) / move_temperature_m)`` of the
  predicted field ``h``, which trains what greedy descent reads (the ordering of
  the neighbours' costs), or (``"difference"``) the
  Huber error of the predicted cost difference to each legal neighbour, in pixels.

Every ``eval_every`` steps a jitted
evaluation decodes a route on each held-out task by greedy descent on the predicted
field and scores it, planner and metric kernels in one compiled call
(:func:`passage_jax.learned.evaluate_batch.evaluate_batch` of :func:`greedy_planner_fn`,
the batch planner protocol of :mod:`passage_jax.protocol.batch`), so the log shows success and
regret next to the loss. Everything random comes from the config's seed (a run is
repeatable bit for bit on one machine).

:class:`TrainConfig` checks every key against its field's type and range (one loop
over the fields), refusing a bad one in one line that names the key and the value;
:func:`write_checkpoint` refuses an existing checkpoint unless ``overwrite=True``
(:func:`~passage_jax.learned.checkpoint.check_checkpoint_target`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import reprlib
import time
import typing
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from passage_jax.checks import is_number
from passage_jax.data.terrain import RASTERS
from passage_jax.fileio import utc_now
from passage_jax.graph import MOVES, OBJECTIVES, GraphSpec, edge_cost_field_by_index, move_values, neighbours
from passage_jax.learned.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from passage_jax.learned.data import CLEAR_OF, TRAINING_RASTERS, CropRule, Material, make_material
from passage_jax.learned.evaluate_batch import EvalCohort, evaluate_batch
from passage_jax.learned.guide import shipped_checkpoint
from passage_jax.learned.model import (
    COORD_SCALE,
    ValueFieldNet,
    ValueFieldUNet,
    feature_grid,
    log_ratio_to_cost,
    module_config,
    param_count,
)
from passage_jax.metrics import Route
from passage_jax.metrics.fields import descent_direction
from passage_jax.protocol.batch import BATCH_STATUS_CODE, BatchRoutes, PlanBatch

__all__ = ["TrainConfig", "TrainResult", "eval_set", "greedy_decode", "greedy_planner_fn", "evaluate_params",
           "train", "write_checkpoint", "init_checkpoint", "init_reference", "MOVE_LOSSES", "MODELS",
           "CONFIG_MAX_BYTES"]

PIXEL_SIZE_M = GraphSpec().pixel_size_m
#: The networks a config can train (``model``): the dilated CNN of the 64² planner
#: (:class:`ValueFieldNet`: ``width``, ``dilations``) or the U-Net whose receptive field
#: spans a 256² crop (:class:`ValueFieldUNet`: ``widths``, ``bottleneck_dilations``).
MODELS = ("dilated", "unet")
#: The term added to the log-ratio loss: the squared error of the cost-to-go difference
#: to each legal neighbour (in pixels), or the cross-entropy of the greedy move choice.
MOVE_LOSSES = ("difference", "choice")
#: The largest training config file ``train`` reads (bytes).
CONFIG_MAX_BYTES = 1 << 20
_SHOW_CHARS = 200
_SEED_LIMIT = 2 ** 63


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 12, 12, 12, 12
_REPR.maxstring = _REPR.maxother = _SHOW_CHARS


def _show(value) -> str:
    """A bounded ``repr`` of ``value`` (depth and length capped, so a document of
    shared references is never expanded), cut to about 200 characters, on one line."""
    text = " ".join(_REPR.repr(value).split())
    return text if len(text) <= _SHOW_CHARS else text[:_SHOW_CHARS] + "..."


def _positive(v) -> bool:
    return v >= 1


#: field -> (check of the typed value, what the value must be)
_RULES: dict[str, tuple[Callable, str]] = {
    "resolution": (lambda v: v >= 8, "an integer >= 8"),
    "n_train": (_positive, "a positive integer"),
    "n_eval": (_positive, "a positive integer"),
    "steps": (_positive, "a positive integer"),
    "batch": (_positive, "a positive integer"),
    "width": (_positive, "a positive integer"),
    "eval_every": (_positive, "a positive integer"),
    "warmup_steps": (lambda v: v >= 0, "a non-negative integer"),
    "seed": (lambda v: 0 <= v < _SEED_LIMIT, "an integer in [0, 2**63)"),
    "learning_rate": (lambda v: v > 0, "a positive number"),
    "coverage_max": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "move_loss_weight": (lambda v: v >= 0, "a non-negative number"),
    "move_temperature_m": (lambda v: v > 0, "a positive number"),
    "dilations": (lambda v: len(v) > 0 and min(v) >= 1, "a non-empty list of positive integers"),
    "model": (lambda v: v in MODELS, f"one of {list(MODELS)}"),
    "clear_of": (lambda v: v in CLEAR_OF, f"one of {list(CLEAR_OF)}"),
    "widths": (lambda v: len(v) >= 2 and min(v) >= 1,
               "a list of at least two positive integers (full resolution, then each level)"),
    "bottleneck_dilations": (lambda v: min(v, default=1) >= 1, "a list of positive integers"),
    "objectives": (lambda v: len(v) > 0 and set(v) <= set(OBJECTIVES),
                   f"a non-empty list of {list(OBJECTIVES)}"),
    "rasters": (lambda v: len(v) > 0 and set(v) <= set(RASTERS) and len(set(v)) == len(v),
                f"a non-empty list of distinct shipped rasters {list(RASTERS)}"),
    "move_loss": (lambda v: v in MOVE_LOSSES, f"one of {list(MOVE_LOSSES)}"),
}

_TYPE_NAMES = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}


def _typed(kind, value):
    """``value`` as the field type ``kind`` (int, float, bool, str or ``tuple[X, ...]``),
    or raise ``TypeError`` with what it must be. Integral floats count as integers."""
    if typing.get_origin(kind) is tuple:
        (item, _) = typing.get_args(kind)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise TypeError(f"a list of {_TYPE_NAMES[item].split(' ', 1)[1]}s")
        try:
            return tuple(_typed(item, v) for v in value)
        except TypeError:
            raise TypeError(f"a list of {_TYPE_NAMES[item].split(' ', 1)[1]}s") from None
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(_TYPE_NAMES[bool])
        return value
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(_TYPE_NAMES[str])
        return value
    if not is_number(value) or not math.isfinite(value):
        raise TypeError(_TYPE_NAMES[kind])
    if kind is int:
        if int(value) != value:
            raise TypeError(_TYPE_NAMES[int])
        return int(value)
    return value


@functools.cache
def _field_types(cls) -> dict:
    return typing.get_type_hints(cls)


def _checked(cls, name: str, value):
    """The value of field ``name`` typed and range-checked; a ``ValueError`` naming the
    key and the value otherwise."""
    try:
        v = _typed(_field_types(cls)[name], value)
    except TypeError as e:
        raise ValueError(f"train config key {name!r}: {_show(value)} is not {e}") from None
    check, what = _RULES.get(name, (None, ""))
    if check is not None and not check(v):
        raise ValueError(f"train config key {name!r}: {_show(value)} is not {what}")
    return v


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Training settings (the keys of a ``configs/train_*.yaml``)."""

    name: str = "value64"
    resolution: int = 64
    n_train: int = 1024
    n_eval: int = 48
    steps: int = 1500
    batch: int = 16
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    width: int = 24
    dilations: tuple[int, ...] = (1, 2, 4, 8, 16, 1)
    model: str = "dilated"
    widths: tuple[int, ...] = (16, 24, 32, 48, 64, 64)
    bottleneck_dilations: tuple[int, ...] = (1, 2, 4)
    objectives: tuple[str, ...] = ("elevation",)
    rasters: tuple[str, ...] = TRAINING_RASTERS
    coverage_max: float = 0.3
    clear_of: str = "own"
    augment: bool = True
    move_loss: str = "choice"
    move_loss_weight: float = 1.0
    move_temperature_m: float = 30.0
    eval_every: int = 250
    seed: int = 0
    init: str = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _checked(type(self), f.name, getattr(self, f.name)))
        step = 2 ** (len(self.widths) - 1)
        if self.model == "unet" and self.resolution % step:
            raise ValueError(f"train config key 'resolution': {self.resolution} is not divisible "
                             f"by {step}, as the U-Net of {len(self.widths) - 1} levels ('widths') "
                             f"needs")

    def module(self):
        """The untrained network this config trains (``model``)."""
        if self.model == "unet":
            return ValueFieldUNet(widths=self.widths, bottleneck_dilations=self.bottleneck_dilations)
        return ValueFieldNet(width=self.width, dilations=self.dilations)

    @classmethod
    def from_dict(cls, d: Mapping, *, source=None) -> TrainConfig:
        """A config from a document's mapping; refuses a non-mapping document, unknown
        keys and bad values, naming them (and the file ``source`` when given)."""
        where = "train config" if source is None else f"train config {source}"
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: the document must be a mapping of keys to values, "
                             f"got {type(d).__name__} {_show(d)}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in d if k not in names]
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {_show(unknown)}; known: {sorted(names)}")
        try:
            return cls(**dict(d))
        except ValueError as e:
            raise ValueError(where + str(e).removeprefix("train config")) from None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """Trained module and parameters, the log (one dict per evaluation), the final
    held-out metrics, wall seconds (material, training) and the config."""

    module: ValueFieldNet | ValueFieldUNet
    params: dict
    history: list
    metrics: dict
    seconds: dict
    config: TrainConfig
    steps: int
    init: dict | None = None


def eval_set(m: Material) -> EvalCohort:
    """The held-out tasks of a :class:`Material` as an
    :class:`~passage_jax.learned.evaluate_batch.EvalCohort` on device (float32 grids, every
    scene live and counted)."""
    z = jnp.asarray(m.elevation, jnp.float32)
    n = z.shape[0]
    batch = PlanBatch(elevation=z, obstacles=jnp.asarray(m.obstacles), start=jnp.asarray(m.start),
                      goal=jnp.asarray(m.goal), cost_model=jnp.asarray(m.model_index),
                      cost_weight=jnp.asarray(m.weight, jnp.float32), live=jnp.ones(n, bool),
                      pixel_size_m=PIXEL_SIZE_M)
    return EvalCohort(batch=batch, c_star=jnp.asarray(m.c_star, jnp.float32),
                      references=Route(jnp.asarray(m.routes), jnp.asarray(m.route_length)),
                      qualified=jnp.ones(n, bool))


def greedy_decode(v, edge_costs, start, goal, max_length: int):
    """Greedy descent on field ``v`` with edge costs (8, H, W): ``(cells (L, 2),
    length)``; stops at the goal, else runs ``max_length`` cells (an invalid route)."""
    move = descent_direction(v, edge_costs)
    moves = jnp.asarray(MOVES)
    hi = jnp.asarray(v.shape) - 1

    def step(pos, _):
        nxt = jnp.clip(pos + moves[move[pos[0], pos[1]]], 0, hi)
        nxt = jnp.where(jnp.all(pos == goal), pos, nxt)
        return nxt, nxt

    _, rest = jax.lax.scan(step, start, None, length=max_length - 1)
    route = jnp.concatenate([start[None], rest])
    at_goal = jnp.all(route == goal, axis=1)
    length = jnp.where(at_goal.any(), jnp.argmax(at_goal) + 1, max_length)
    return route, length.astype(jnp.int32)


def _features(z, ob, goal, midx, w):
    return jax.vmap(lambda a, b, c, d, e: feature_grid(a, b, c, d, e, PIXEL_SIZE_M))(z, ob, goal, midx, w)


def _octile(goal, shape):
    h, w = shape
    rr = jnp.arange(h, dtype=jnp.float32)[None, :, None]
    cc = jnp.arange(w, dtype=jnp.float32)[None, None, :]
    dy = jnp.abs(goal[:, 0, None, None].astype(jnp.float32) - rr)
    dx = jnp.abs(goal[:, 1, None, None].astype(jnp.float32) - cc)
    return jnp.maximum(dy, dx) + (jnp.sqrt(2.0) - 1.0) * jnp.minimum(dy, dx)


def greedy_planner_fn(module, max_length: int):
    """``planner_fn(params, batch) -> BatchRoutes`` of greedy descent on ``module``'s field
    (:func:`greedy_decode`, at most ``max_length`` cells; a route that does not reach the
    goal is ``no_path``): the batch planner the training log is evaluated with."""
    def planner_fn(params, batch: PlanBatch) -> BatchRoutes:
        x = _features(batch.elevation, batch.obstacles, batch.goal, batch.cost_model, batch.cost_weight)
        u = module.apply(params, x)
        h = log_ratio_to_cost(u, _octile(batch.goal, batch.elevation.shape[1:]), PIXEL_SIZE_M)
        h = jnp.where(batch.obstacles, jnp.inf, h)
        c = jax.vmap(lambda z, o, m, w: edge_cost_field_by_index(z, o, m, w, PIXEL_SIZE_M))(
            batch.elevation, batch.obstacles, batch.cost_model, batch.cost_weight)
        routes, lengths = jax.vmap(lambda a, b, s, g: greedy_decode(a, b, s, g, max_length))(
            h, c, batch.start, batch.goal)
        reached = jnp.all(routes[jnp.arange(routes.shape[0]), lengths - 1] == batch.goal, axis=1)
        status = jnp.where(reached, BATCH_STATUS_CODE["ok"], BATCH_STATUS_CODE["no_path"])
        return BatchRoutes(cells=routes, length=lengths, status=status.astype(jnp.int32))
    return planner_fn


def evaluate_params(module, params, ev: EvalCohort, *, max_length: int | None = None) -> dict:
    """Held-out primary metrics of greedy descent on the network's field (host dict):
    :func:`passage_jax.learned.evaluate_batch.evaluate_batch` of :func:`greedy_planner_fn`,
    the planner and the metric kernels in one compiled call."""
    n = ev.batch.elevation.shape[-1]
    out = jax.device_get(_eval_fn(module, int(max_length or 4 * n))(params, ev))
    return {k: float(v) for k, v in out.items() if not isinstance(v, dict) and np.ndim(v) == 0}


_EVAL_CACHE: dict = {}


def _eval_fn(module, max_length):
    key = (module, max_length)
    if key not in _EVAL_CACHE:
        planner_fn = greedy_planner_fn(module, max_length)
        _EVAL_CACHE[key] = jax.jit(lambda params, ev: evaluate_batch(planner_fn, params, ev))
    return _EVAL_CACHE[key]


def _dihedral(k, arrays):
    """The k-th (0..7) rotation/reflection of (B, H, W) arrays (square crops)."""
    def branch(j):
        def f(arrs):
            out = []
            for a in arrs:
                a = jnp.rot90(a, j % 4, axes=(1, 2))
                out.append(jnp.flip(a, axis=2) if j >= 4 else a)
            return tuple(out)
        return f
    return jax.lax.switch(k, [branch(j) for j in range(8)], arrays)


def _device_material(m: Material):
    v = np.asarray(m.values, np.float64)
    return {"z": jnp.asarray(m.elevation, jnp.float32), "ob": jnp.asarray(m.obstacles),
            "v": jnp.asarray(np.where(np.isfinite(v), v, -1.0), jnp.float32),
            "midx": jnp.asarray(m.model_index), "w": jnp.asarray(m.weight, jnp.float32)}


def _move_logits(h, c, temperature_m):
    """(B, 8, H, W) logits ``-(C[k] + h(next)) / temperature`` of the greedy choice."""
    q = move_values(h, c)
    q = jnp.where(jnp.isfinite(q), q, 1e9)
    return -(q - jnp.min(q, axis=1, keepdims=True)) / temperature_m


def _make_step(module, tx, config: TrainConfig):
    batch, augment = config.batch, config.augment
    lam, temp = config.move_loss_weight, config.move_temperature_m

    def loss_fn(params, x, target, mask, aux):
        u = module.apply(params, x)
        n_mask = jnp.maximum(jnp.sum(mask), 1)
        loss = jnp.sum(jnp.where(mask, (u - target) ** 2, 0.0)) / n_mask
        if lam > 0 and config.move_loss == "difference":
            oct_, c, best, v = aux
            h = log_ratio_to_cost(u, oct_, PIXEL_SIZE_M)
            legal = jnp.isfinite(c) & neighbours(v >= 0, False)
            dh = neighbours(h, 0.0) - h[:, None]
            dv = neighbours(v, 0.0) - v[:, None]
            pair = legal & mask[:, None]
            err = jnp.where(pair, (dh - dv) / PIXEL_SIZE_M, 0.0)
            loss = loss + lam * jnp.sum(optax.huber_loss(err)) / jnp.maximum(jnp.sum(pair), 1)
        elif lam > 0:
            oct_, c, best, v = aux
            h = log_ratio_to_cost(u, oct_, PIXEL_SIZE_M)
            logp = jax.nn.log_softmax(_move_logits(h, c, temp), axis=1)
            nll = -jnp.take_along_axis(logp, best[:, None], axis=1)[:, 0]
            loss = loss + lam * jnp.sum(jnp.where(mask, nll, 0.0)) / n_mask
        return loss

    @jax.jit
    def step(params, opt_state, data, key):
        k_idx, k_aug = jax.random.split(key)
        n = data["z"].shape[0]
        idx = jax.random.choice(k_idx, n, (batch,), replace=n < batch)
        z, ob, v = data["z"][idx], data["ob"][idx], data["v"][idx]
        if augment and z.shape[1] == z.shape[2]:
            z, ob, v = _dihedral(jax.random.randint(k_aug, (), 0, 8), (z, ob, v))
        midx, w = data["midx"][idx], data["w"][idx]
        # the goal is the one cell of cost-to-go 0 (unreachable cells hold -1)
        flat = jnp.where(v >= 0, v, jnp.inf).reshape(batch, -1)
        g = jnp.argmin(flat, axis=1)
        goal = jnp.stack([g // z.shape[2], g % z.shape[2]], axis=1).astype(jnp.int32)
        x = _features(z, ob, goal, midx, w)
        oct_ = _octile(goal, z.shape[1:])
        mask = (v > 0) & ~ob & (oct_ > 0)
        target = jnp.log(jnp.where(mask, v, 1.0) / jnp.where(mask, oct_ * PIXEL_SIZE_M, 1.0))
        c = jax.vmap(lambda a, b, m, ww: edge_cost_field_by_index(a, b, m, ww, PIXEL_SIZE_M))(
            z, ob, midx, w)
        v_inf = jnp.where(v >= 0, v, jnp.inf)
        best = jax.vmap(descent_direction)(v_inf, c)
        aux = (oct_, c, best, v)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, target, mask, aux)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def train(config: TrainConfig | Mapping, *, seed: int | None = None,
          progress: Callable[[str, int, int, dict], None] | None = None) -> TrainResult:
    """Train the network of ``config.model`` (:class:`ValueFieldNet` or
    :class:`ValueFieldUNet`; see the module docstring).

    ``seed`` overrides the config's. ``progress(phase, done, total, info)`` is called
    while the material is made (phase ``"data"``) and after each step (``"train"``;
    ``info`` holds the loss and, after an evaluation, the held-out metrics)."""
    if not isinstance(config, TrainConfig):
        config = TrainConfig.from_dict(config)
    if seed is not None:
        config = dataclasses.replace(config, seed=int(seed))
    start = init_checkpoint(config)  # refused before any material is made
    t0 = time.perf_counter()
    train_m, eval_m = _materials(config, progress)
    t_data = time.perf_counter() - t0
    module = config.module()
    key, k_init = jax.random.split(jax.random.PRNGKey(config.seed))
    n = config.resolution
    if start is None:
        params = module.init(k_init, jnp.zeros((1, n, n, 7), jnp.float32))
    else:
        params = jax.tree_util.tree_map(jnp.asarray, start.params)
    fit = _fit(module, params, key, train_m, eval_m, config, progress)
    params = jax.device_get(fit.params)
    fit.metrics["param_count"] = param_count(params)
    init = None if start is None else {"checkpoint": init_reference(config),
                                       "params_sha256": start.checkpoint_id}
    return TrainResult(module=module, params=params, history=fit.history, metrics=fit.metrics,
                       seconds={"data": round(t_data, 2), "train": round(fit.seconds, 2)},
                       config=config, steps=config.steps, init=init)


def init_reference(config: TrainConfig) -> str:
    """``config.init`` with ``{seed}`` replaced by the run's seed ("" for none)."""
    return config.init.replace("{seed}", str(config.seed))


def init_checkpoint(config: TrainConfig) -> Checkpoint | None:
    """The checkpoint ``config.init`` names (a path, or ``shipped:<family>-<seed>``;
    ``{seed}`` is the run's seed), whose parameters the training starts from; None
    when ``init`` is empty. Refused (a ``ValueError`` naming the key) when it cannot be
    read or holds another network than ``config.model`` and its sizes."""
    ref = init_reference(config)
    if not ref:
        return None
    try:
        path = shipped_checkpoint(ref.split(":", 1)[1]) if ref.startswith("shipped:") else ref
        ck = load_checkpoint(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"train config key 'init': {ref!r} cannot be loaded ({e})") from None
    want, got = module_config(config.module()), module_config(ck.module)
    if want != got:
        raise ValueError(f"train config key 'init': {ref!r} holds {got}, not the network this "
                         f"config trains ({want})")
    return ck


def _materials(config: TrainConfig, progress) -> tuple[Material, Material]:
    """The training and held-out :class:`Material` of ``config`` (streams 0 and 1 of its
    seed), reporting ``("data", done, total, {})`` to ``progress``."""
    n_total = config.n_train + config.n_eval

    def data_progress(offset):
        return (lambda d, t: progress("data", offset + d, n_total, {})) if progress else None

    common = dict(rule=CropRule(objectives=tuple(config.objectives), rasters=tuple(config.rasters),
                                coverage_max=config.coverage_max, clear_of=config.clear_of))
    train_m = make_material(config.n_train, config.resolution, seed=config.seed, stream=0,
                            progress=data_progress(0), **common)
    eval_m = make_material(config.n_eval, config.resolution, seed=config.seed, stream=1,
                           progress=data_progress(config.n_train), **common)
    return train_m, eval_m


def _optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Adam on a warmup + cosine schedule, gradients clipped to global norm 1."""
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, min(config.warmup_steps, config.steps), config.steps,
        config.learning_rate * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule))


@dataclasses.dataclass(frozen=True)
class _Fit:
    """What the training loop returns: the final parameters (on device), the log, the
    last held-out metrics and the loop's wall seconds."""

    params: dict
    history: list
    metrics: dict
    seconds: float


_LOGGED = ("success_rate", "regret_median", "regret_p90")


def _fit(module, params, key, train_m: Material, eval_m: Material, config: TrainConfig,
         progress) -> _Fit:
    """``config.steps`` optimizer steps from ``params``, evaluated on ``eval_m`` at step 0,
    every ``eval_every`` steps and at the last one."""
    tx = _optimizer(config)
    opt_state = tx.init(params)
    step = _make_step(module, tx, config)
    data = _device_material(train_m)
    ev = eval_set(eval_m)
    t1 = time.perf_counter()
    m0 = evaluate_params(module, params, ev)
    history: list[dict] = [{"step": 0, "loss": None, "seconds": 0.0, **{k: m0[k] for k in _LOGGED}}]
    losses = []
    metrics: dict = {}
    for i in range(1, config.steps + 1):
        key, k = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, data, k)
        losses.append(loss)
        info: dict = {}
        if i % config.eval_every == 0 or i == config.steps:
            metrics = evaluate_params(module, params, ev)
            mean_loss = float(jnp.mean(jnp.stack(losses)))
            losses = []
            info = {"step": i, "loss": mean_loss, "seconds": round(time.perf_counter() - t1, 2),
                    **{k2: metrics[k2] for k2 in _LOGGED}}
            history.append(info)
        if progress:
            progress("train", i, config.steps, info or {"loss": None})
    return _Fit(params=params, history=history, metrics=metrics, seconds=time.perf_counter() - t1)


def hardware() -> str:
    """Where training ran, for the checkpoint: machine, usable CPUs, JAX and its device."""
    dev = jax.devices()[0]
    return (f"{platform.machine()} {platform.processor() or ''}, {len(os.sched_getaffinity(0))} usable "
            f"CPUs, jax {jax.__version__} on {dev.platform} ({dev.device_kind})").replace(" ,", ",")


def write_checkpoint(result: TrainResult, path, *, overwrite: bool = False) -> object:
    """Save a :class:`TrainResult` as a checkpoint (``path``: a folder, or the
    metadata ``.json``); returns the metadata path. An existing checkpoint there is
    refused unless ``overwrite``, the shipped checkpoint folder always
    (:func:`~passage_jax.learned.checkpoint.check_checkpoint_target`)."""
    meta = {"created": utc_now(), "config": result.config.to_dict(), "seed": result.config.seed,
            "step": result.steps, "metrics": result.metrics, "history": result.history,
            "seconds": result.seconds, "hardware": hardware(), "coord_scale": COORD_SCALE,
            "prediction": "log correction factor u >= 0: h = exp(u) * octile * pixel_size_m"}
    if result.init is not None:
        meta["init"] = result.init
    return save_checkpoint(path, result.module, result.params, meta, overwrite=overwrite)
