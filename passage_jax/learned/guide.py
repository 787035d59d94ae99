"""Guides: a callable ``guide(request) -> (H, W) float64`` cost-to-go estimate.

:class:`NetworkGuide` wraps a Flax module and its parameters. By default the module
is read as a :class:`~passage_jax.learned.model.ValueFieldNet`-style network: it
takes :func:`~passage_jax.learned.model.features` (B, H, W, C) and returns the log
correction factor ``u`` (B, H, W), turned into ``exp(u) * octile * pixel_size_m``
(``output="log_ratio"``); a user's network that predicts the cost-to-go itself
passes ``output="cost_to_go"`` (and its own ``feature_fn`` if it reads other inputs).
The field is +inf on obstacle cells and 0 at the goal.

:func:`load_guide` builds one from a checkpoint path, ``"shipped:<seed>"`` (the 64x64
network) or ``"shipped:value256-<seed>"`` (the 256x256 U-Net).
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.learned.checkpoint import SHIPPED_CHECKPOINT_DIR, load_checkpoint
from passage_jax.learned.model import HFLIP_SIGNS, features, octile_grid
from passage_jax.learned.tiling import tiled_apply, tiling_protocol

__all__ = ["SHIPPED_DIR", "SHIPPED_RESOLUTION", "SHIPPED_FAMILIES", "NetworkGuide", "shipped_checkpoint",
           "load_guide", "GUIDE_OUTPUTS", "network_apply"]

SHIPPED_DIR = SHIPPED_CHECKPOINT_DIR  # one home: passage_jax.learned.checkpoint
#: The crop size the shipped 64x64 checkpoints (``shipped:<seed>``) were trained on.
SHIPPED_RESOLUTION = 64
#: The shipped checkpoint families: ``<family>-<seed>.json`` in :data:`SHIPPED_DIR`.
SHIPPED_FAMILIES = ("value64", "value256", "value256ft")
GUIDE_OUTPUTS = ("log_ratio", "cost_to_go")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def network_apply(module, dtype: str, params, x) -> jax.Array:
    """The guide's forward: ``module.apply(params, x)`` with ``x`` cast to the compute
    ``dtype`` ("float32" or "bfloat16"), the output (B, H, W) as float32. Pure; what
    :meth:`NetworkGuide.apply_batch` jits, and what the batched planner
    (:mod:`passage_jax.learned.batched`) calls inside its own jitted function."""
    return module.apply(params, jnp.asarray(x, _DTYPES[dtype])).astype(jnp.float32)


class NetworkGuide:
    """Cost-to-go estimate of a Flax network (see the module docstring).

    ``dtype`` ("float32" or "bfloat16") is the compute dtype: parameters and inputs
    are cast to it; the result is always float64 on the host. ``checkpoint_id`` is
    the sha256 of the parameter file it came from (None when built in memory).
    ``tiling`` (None, or a dict from :func:`~passage_jax.learned.tiling.tiling_protocol`)
    applies the network tile by tile through
    :func:`~passage_jax.learned.tiling.tiled_apply` at any scene size, fusing and
    reconstructing the raw output field before it is turned into a cost-to-go once; with
    the default ``feature_fn`` a reflected tile's ``goal_dx`` channel is negated
    (:data:`~passage_jax.learned.model.HFLIP_SIGNS`), so it describes the reflected scene.
    """

    def __init__(self, module, params, *, dtype: str = "float32", output: str = "log_ratio",
                 feature_fn=features, checkpoint_id: str | None = None, tiling: dict | None = None):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        if output not in GUIDE_OUTPUTS:
            raise ValueError(f"output must be one of {GUIDE_OUTPUTS}, got {output!r}")
        self.module = module
        self.dtype = dtype
        self.output = output
        self.feature_fn = feature_fn
        self.checkpoint_id = checkpoint_id
        jdt = _DTYPES[dtype]
        self.params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jdt), params)

        def apply(p, x):
            return network_apply(module, dtype, p, x)

        self._apply = jax.jit(apply)
        self.tiling = None
        if tiling is not None:
            if not isinstance(tiling, dict) or "tile" not in tiling:
                raise ValueError(f"tiling must be a dict with at least 'tile' (see tiling_protocol), "
                                 f"got {tiling!r}")
            t = tiling_protocol(tiling["tile"], tiling.get("stride"), tiling.get("hflip", True),
                                tiling.get("blend", "hann"), tiling.get("stitch", "fields"))
            self.tiling = t
            settings = {k: t[k] for k in ("tile", "stride", "hflip", "blend", "stitch")}
            # the shipped inputs reflect with the goal's column offset negated; a user's
            # feature_fn has its channels reflected as they are
            settings["hflip_signs"] = HFLIP_SIGNS if feature_fn is features else None

            def tiled(p, x):  # (H, W, C) -> (H, W), every tile and both orientations in one jit
                return tiled_apply(lambda b: apply(p, b)[..., None], x, **settings)[..., 0]

            self._tiled = jax.jit(tiled)

    def apply_batch(self, x) -> jax.Array:
        """Raw network output (B, H, W) float32 for inputs (B, H, W, C), jitted."""
        return self._apply(self.params, x)

    def __call__(self, request) -> np.ndarray:
        x = np.asarray(self.feature_fn(request))
        if self.tiling is None:
            out = np.asarray(self.apply_batch(x[None])[0], np.float64)
        else:
            out = np.asarray(self._tiled(self.params, x), np.float64)
        if out.shape != request.shape:
            raise ValueError(f"network output shape {out.shape} != request grid {request.shape}")
        if self.output == "log_ratio":
            oct_ = octile_grid(request.shape, request.goal, np.float32, xp=np).astype(np.float64)
            field = np.exp(out) * oct_ * float(request.graph.pixel_size_m)
        else:
            field = out
        field = np.where(np.isfinite(field), field, np.inf)
        field[request.goal] = 0.0
        field[np.asarray(request.obstacles, bool)] = np.inf
        return field

    def __repr__(self):
        cid = self.checkpoint_id[:12] if self.checkpoint_id else None
        tiled = "" if self.tiling is None else f", tiling={self.tiling['name']}@{self.tiling['tile']}"
        return f"NetworkGuide({type(self.module).__name__}, dtype={self.dtype}, checkpoint={cid}{tiled})"


def shipped_checkpoint(seed) -> Path:
    """Metadata JSON of a shipped checkpoint: ``seed`` alone (an integer, one per
    ``DEFAULT_SEEDS``) names the 64x64 network trained with it (``value64-<seed>``);
    ``"<family>-<seed>"`` names another family of :data:`SHIPPED_FAMILIES` (e.g.
    ``"value256-1234"``, the U-Net of the 256x256 recipe)."""
    family, _, ref = str(seed).rpartition("-") if isinstance(seed, str) else ("", "", seed)
    family = family or f"value{SHIPPED_RESOLUTION}"
    if family not in SHIPPED_FAMILIES:
        raise ValueError(f"shipped checkpoint family {family!r} is not one of {list(SHIPPED_FAMILIES)} "
                         f"(write 'shipped:<seed>' or 'shipped:<family>-<seed>')")
    try:
        seed = int(ref)
    except (TypeError, ValueError):
        raise ValueError(f"shipped checkpoint seed must be an integer, got {ref!r}") from None
    path = SHIPPED_DIR / f"{family}-{seed}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no shipped {family} checkpoint for seed {seed} ({path}); shipped "
                                f"seeds: {list(DEFAULT_SEEDS)}")
    return path


def load_guide(checkpoint, *, dtype: str = "float32", tiling: dict | None = None) -> NetworkGuide:
    """A :class:`NetworkGuide` from a checkpoint path (JSON, parameter file or folder),
    ``"shipped:<seed>"`` or ``"shipped:<family>-<seed>"`` (:func:`shipped_checkpoint`);
    ``tiling`` as in :class:`NetworkGuide`."""
    if isinstance(checkpoint, str) and checkpoint.startswith("shipped:"):
        path = shipped_checkpoint(checkpoint.split(":", 1)[1])
    else:
        path = Path(checkpoint)
    ck = load_checkpoint(path, dtype=_DTYPES.get(dtype, jnp.float32))
    return NetworkGuide(ck.module, ck.params, dtype=dtype, checkpoint_id=ck.checkpoint_id, tiling=tiling)
