"""The value-field network: inputs built from a request, a small fully convolutional
Flax (linen) module, and the map from its output to a cost-to-go estimate.

What the network predicts is a *log correction factor* ``u(cell) >= 0`` relative to
a goal-relative straight-line cost::

    h(cell) = exp(u(cell)) * octile(cell, goal) * pixel_size_m

``octile`` is the 8-connected grid distance to the goal in cells (``max + (sqrt2-1)
* min`` of the row and column offsets). Every cost model of this project charges a
step at least its length (``d`` metres), so ``octile * pixel_size_m`` is a lower
bound of the cost-to-go; ``u = 0`` reproduces it and ``u > 0`` says how much the
terrain and the obstacles add. ``u`` is defined on any crop, with or without the
goal inside it (the goal-relative coordinates carry the direction and distance),
which is what tiled inference needs. ``h`` is 0 at the goal by construction.

Inputs (``FEATURE_NAMES``, channel order), all computed by :func:`feature_grid`
(jittable) from elevation, obstacles, goal, cost model and weight:

* ``elevation`` — the request's elevation rescaled to the crop (``(z - min) /
  (max - min)``, 0 on a flat crop): the request tensor's normalised elevation,
  stretched to the crop so the calibration range does not squash it;
* ``obstacles`` — 1 on blocked cells;
* ``goal_dy``, ``goal_dx`` — goal minus cell, in units of ``COORD_SCALE`` cells;
* ``octile`` — the octile distance to the goal in units of ``COORD_SCALE`` cells;
* ``excess_mean``, ``excess_max`` — local slope under the request's cost model: the
  mean and the maximum over the legal moves of a cell of ``C / d - 1`` (the cost
  of a move beyond its length, relative to its length), 0 where no move is legal.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph import MODEL_INDEX, STEP_PIXELS, edge_cost_field_by_index

__all__ = [
    "FEATURE_NAMES", "N_FEATURES", "HFLIP_SIGNS", "COORD_SCALE", "EXCESS_CLIP", "ValueFieldNet",
    "ValueFieldUNet", "unet_receptive_field",
    "octile_grid", "feature_grid", "features", "request_arrays", "log_ratio_to_cost",
    "module_config", "module_from_config", "param_count",
]

FEATURE_NAMES = ("elevation", "obstacles", "goal_dy", "goal_dx", "octile", "excess_mean",
                 "excess_max")
N_FEATURES = len(FEATURE_NAMES)
#: Per-channel factors of :func:`features` under a reflection of the width axis: the
#: goal's column offset changes sign, every other channel is reflected as it is.
HFLIP_SIGNS = tuple(-1.0 if name == "goal_dx" else 1.0 for name in FEATURE_NAMES)
#: Cells per unit of the goal-relative channels (fixed, so a crop of any size reads alike).
COORD_SCALE = 64.0
#: Upper clip of the local-slope channels.
EXCESS_CLIP = 10.0
_SQRT2_M1 = math.sqrt(2.0) - 1.0


def octile_grid(shape, goal, dtype=jnp.float32, *, xp=jnp):
    """(H, W) octile (8-connected) distance in cells from every cell to ``goal``
    (``goal`` may lie outside the grid). Jittable with ``xp=jnp`` (``shape`` static);
    ``xp=np`` computes it on the host, with no device dispatch (per-request use)."""
    rr = xp.arange(shape[0], dtype=dtype)[:, None]
    cc = xp.arange(shape[1], dtype=dtype)[None, :]
    dy = xp.abs(xp.asarray(goal[0], dtype) - rr)
    dx = xp.abs(xp.asarray(goal[1], dtype) - cc)
    return xp.maximum(dy, dx) + _SQRT2_M1 * xp.minimum(dy, dx)


def feature_grid(elevation, obstacles, goal, model_index, weight, pixel_size_m: float = 30.0):
    """(H, W, N_FEATURES) network input for one scene, in ``elevation``'s dtype.

    ``model_index`` is an id of ``MODEL_INDEX`` (may be traced), ``weight`` the cost
    weight. Jittable (``pixel_size_m`` static); batch with ``vmap``."""
    z = jnp.asarray(elevation)
    dt = z.dtype
    ob = jnp.asarray(obstacles).astype(bool)
    zmin, zmax = jnp.min(z), jnp.max(z)
    rng = zmax - zmin
    elev = jnp.where(rng > 0, (z - zmin) / jnp.where(rng > 0, rng, 1.0), 0.0)
    h, w = z.shape
    rr = jnp.arange(h, dtype=dt)[:, None]
    cc = jnp.arange(w, dtype=dt)[None, :]
    gy, gx = jnp.asarray(goal[0], dt), jnp.asarray(goal[1], dt)
    dy = jnp.broadcast_to((gy - rr) / COORD_SCALE, (h, w))
    dx = jnp.broadcast_to((gx - cc) / COORD_SCALE, (h, w))
    oct_ = octile_grid((h, w), (gy, gx), dt) / COORD_SCALE
    cost = edge_cost_field_by_index(z, ob, model_index, jnp.asarray(weight, dt), pixel_size_m)
    d = jnp.asarray(STEP_PIXELS * pixel_size_m, dt)[:, None, None]
    legal = jnp.isfinite(cost)
    excess = jnp.clip(jnp.where(legal, cost / d - 1.0, 0.0), 0.0, EXCESS_CLIP)
    n_legal = jnp.sum(legal, axis=0)
    ex_mean = jnp.where(n_legal > 0, jnp.sum(excess, axis=0) / jnp.maximum(n_legal, 1), 0.0)
    ex_max = jnp.max(excess, axis=0)
    return jnp.stack([elev, ob.astype(dt), dy, dx, oct_, ex_mean, ex_max], axis=-1).astype(dt)


_feature_grid_jit = jax.jit(feature_grid, static_argnames=("pixel_size_m",))


def request_arrays(request):
    """``(elevation float32, obstacles, goal, model_index, weight, pixel_size_m)`` of a
    :class:`~passage_jax.protocol.PlanRequest`."""
    if request.cost_model not in MODEL_INDEX:
        raise ValueError(f"request.cost_model {request.cost_model!r} is not one of {sorted(MODEL_INDEX)}")
    z = np.asarray(request.elevation, np.float32)
    return (z, np.asarray(request.obstacles, bool), np.asarray(request.goal, np.int32),
            np.int32(MODEL_INDEX[request.cost_model]), np.float32(request.cost_weight),
            float(request.graph.pixel_size_m))


def features(request) -> np.ndarray:
    """(H, W, N_FEATURES) float32 network input of a ``PlanRequest`` (see the module
    docstring for the channels). Deterministic: a pure function of the request."""
    z, ob, goal, midx, w, px = request_arrays(request)
    return np.asarray(_feature_grid_jit(z, ob, goal, midx, w, pixel_size_m=px))


class ValueFieldNet(nn.Module):
    """Fully convolutional value-field network: (B, H, W, C) -> (B, H, W) ``u >= 0``.

    A 3x3 stem to ``width`` channels, one residual 3x3 block per entry of
    ``dilations`` (GELU; the dilations widen the receptive field to
    ``3 + 2 * sum(dilations)`` cells), and a 1x1 head through a softplus.
    """

    width: int = 24
    dilations: tuple = (1, 2, 4, 8, 16, 1)
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x):
        x = jnp.asarray(x, self.dtype)
        y = nn.gelu(nn.Conv(self.width, (3, 3), dtype=self.dtype, name="stem")(x))
        for i, d in enumerate(self.dilations):
            y = y + nn.gelu(nn.Conv(self.width, (3, 3), kernel_dilation=(d, d), dtype=self.dtype,
                                    name=f"block{i}")(y))
        raw = nn.Conv(1, (1, 1), dtype=self.dtype, name="head")(y)[..., 0]
        return nn.softplus(raw.astype(jnp.float32))


class ValueFieldUNet(nn.Module):
    """U-Net value-field network: (B, H, W, C) -> (B, H, W) ``u >= 0`` (same inputs and
    output convention as :class:`ValueFieldNet`), whose receptive field spans a whole
    256x256 crop at a small cost per cell.

    ``widths`` has ``levels + 1`` entries (channels at full resolution, then after each
    stride-2 step). Encoder: a 3x3 stem, then per level a stride-2 3x3 conv (GELU).
    Bottleneck: one residual 3x3 block per entry of ``bottleneck_dilations`` at the
    coarsest level. Decoder, per level back up: nearest-neighbour upsampling by 2, a
    1x1 projection added to the encoder's skip, a 3x3 conv (GELU, residual); a 1x1
    head through a softplus. Fully convolutional: H and W must be divisible by
    ``2 ** levels`` (anything else is refused with a ValueError naming the shape);
    the receptive field is :func:`unet_receptive_field` cells.
    """

    widths: tuple = (16, 24, 32, 48, 64, 64)
    bottleneck_dilations: tuple = (1, 2, 4)
    dtype: object = jnp.float32

    @property
    def levels(self) -> int:
        return len(self.widths) - 1

    @nn.compact
    def __call__(self, x):
        x = jnp.asarray(x, self.dtype)
        levels = self.levels
        step = 2 ** levels
        if x.ndim != 4 or x.shape[1] % step or x.shape[2] % step:
            raise ValueError(f"ValueFieldUNet with {levels} levels needs input (B, H, W, C) with "
                             f"H and W divisible by {step}, got shape {tuple(x.shape)}")
        conv = lambda w, k=3, **kw: nn.Conv(w, (k, k), dtype=self.dtype, **kw)  # noqa: E731
        y = nn.gelu(conv(self.widths[0], name="stem")(x))
        skips = [y]
        for i in range(1, levels + 1):
            y = nn.gelu(conv(self.widths[i], strides=(2, 2), name=f"down{i}")(y))
            skips.append(y)
        for j, d in enumerate(self.bottleneck_dilations):
            y = y + nn.gelu(conv(self.widths[-1], kernel_dilation=(d, d), name=f"mid{j}")(y))
        for i in range(levels - 1, -1, -1):
            y = jnp.repeat(jnp.repeat(y, 2, axis=1), 2, axis=2)
            y = conv(self.widths[i], 1, name=f"proj{i}")(y) + skips[i]
            y = y + nn.gelu(conv(self.widths[i], name=f"up{i}")(y))
        raw = nn.Conv(1, (1, 1), dtype=self.dtype, name="head")(y)[..., 0]
        return nn.softplus(raw.astype(jnp.float32))


def unet_receptive_field(levels: int, bottleneck_dilations=(1, 2, 4)) -> int:
    """Receptive field (cells, one side) of a :class:`ValueFieldUNet`: the stem (3),
    each stride-2 3x3 conv, the dilated bottleneck and each decoder 3x3 conv."""
    rf, jump = 3, 1
    for _ in range(levels):
        rf += 2 * jump
        jump *= 2
    rf += sum(2 * d * jump for d in bottleneck_dilations)
    for _ in range(levels):
        jump //= 2
        rf += 2 * jump
    return rf


def log_ratio_to_cost(u, octile_cells, pixel_size_m: float = 30.0):
    """Cost-to-go ``exp(u) * octile * pixel_size_m`` (any array namespace via jnp)."""
    return jnp.exp(u) * octile_cells * pixel_size_m


def module_config(module) -> dict:
    """JSON-able description of a :class:`ValueFieldNet` or :class:`ValueFieldUNet`
    (what a checkpoint records)."""
    if isinstance(module, ValueFieldUNet):
        return {"class": "ValueFieldUNet", "widths": [int(w) for w in module.widths],
                "bottleneck_dilations": [int(d) for d in module.bottleneck_dilations],
                "in_features": N_FEATURES}
    return {"class": "ValueFieldNet", "width": int(module.width),
            "dilations": [int(d) for d in module.dilations], "in_features": N_FEATURES}


def module_from_config(config: dict, dtype=jnp.float32):
    """Rebuild the module a checkpoint describes; refuses an unknown class or inputs."""
    cls = config.get("class")
    if cls not in ("ValueFieldNet", "ValueFieldUNet"):
        raise ValueError(f"model.class {cls!r} is not 'ValueFieldNet' or 'ValueFieldUNet'")
    if int(config.get("in_features", N_FEATURES)) != N_FEATURES:
        raise ValueError(f"model.in_features {config.get('in_features')} != {N_FEATURES} "
                         f"(inputs {FEATURE_NAMES})")
    if cls == "ValueFieldUNet":
        widths = tuple(int(w) for w in config["widths"])
        dil = tuple(int(d) for d in config.get("bottleneck_dilations", (1, 2, 4)))
        if len(widths) < 2 or min(widths) < 1 or (dil and min(dil) < 1):
            raise ValueError(f"model.widths (>= 2 entries) / bottleneck_dilations must be "
                             f"positive, got {list(widths)}, {list(dil)}")
        return ValueFieldUNet(widths=widths, bottleneck_dilations=dil, dtype=dtype)
    width = int(config["width"])
    dil = tuple(int(d) for d in config["dilations"])
    if width < 1 or not dil or min(dil) < 1:
        raise ValueError(f"model.width/dilations must be positive, got {width}, {list(dil)}")
    return ValueFieldNet(width=width, dilations=dil, dtype=dtype)


def param_count(params) -> int:
    """Number of scalar parameters in a params pytree."""
    return int(sum(np.size(a) for a in jax.tree_util.tree_leaves(params)))
