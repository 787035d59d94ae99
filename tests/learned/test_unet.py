"""The U-Net value-field network: its receptive field, the shapes it takes, its
checkpoint round trip and whole-scene guidance."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import COST_MODELS, GraphSpec
from passage_jax.learned import NetworkGuide, load_guide
from passage_jax.learned.checkpoint import save_checkpoint
from passage_jax.learned.model import (
    N_FEATURES,
    ValueFieldNet,
    ValueFieldUNet,
    module_config,
    module_from_config,
    param_count,
    unet_receptive_field,
)
from passage_jax.learned.planner import LearnedPlanner
from passage_jax.protocol import PlanRequest

NARROW = (4, 4, 4, 4, 4, 4)  # five levels, four channels: cheap, the default's geometry


def _init(module, side):
    x = jnp.zeros((1, side, side, N_FEATURES), jnp.float32)
    return module.init(jax.random.PRNGKey(0), x)


def _input_gradient(module, params, side, cell):
    """|d u[cell] / d x| summed over the input channels, (side, side)."""
    x = jax.random.normal(jax.random.PRNGKey(1), (1, side, side, N_FEATURES))
    g = jax.grad(lambda x: module.apply(params, x)[0, cell[0], cell[1]])(x)
    return np.abs(np.asarray(g[0])).sum(-1)


@pytest.mark.slow  # compiles the gradient of a 256x256 U-Net (about 20 s)
def test_output_at_one_corner_depends_on_the_far_corner_at_256():
    net = ValueFieldUNet(widths=NARROW)
    params = _init(net, 256)
    g = _input_gradient(net, params, 256, (0, 0))
    assert g[255, 255] > 0  # the whole crop reaches every output cell
    assert unet_receptive_field(5) >= 2 * 256 - 1
    # the dilated CNN shipped for 64x64 does not: its field is 67 cells
    cnn = ValueFieldNet(width=4)
    gc = _input_gradient(cnn, _init(cnn, 128), 128, (0, 0))
    assert gc[127, 127] == 0 and gc[0, 0] > 0


@pytest.mark.slow  # gradients of a 128² field; the architecture tests above run by default
def test_receptive_field_bounds_the_gradient_support():
    # two levels, one bottleneck block: the formula's field bounds where the
    # gradient of the centre output is non-zero, and the support reaches past half of it
    net = ValueFieldUNet(widths=(4, 4, 4), bottleneck_dilations=(1,))
    rf = unet_receptive_field(2, (1,))
    side, c = 64, 32
    g = _input_gradient(net, _init(net, side), side, (c, c))
    rows = np.flatnonzero(g.sum(1) > 0)
    assert rows.min() >= c - rf // 2 - 1 and rows.max() <= c + rf // 2 + 1
    assert rows.max() - rows.min() + 1 > rf // 2


def test_shape_refused_naming_it():
    net = ValueFieldUNet()
    with pytest.raises(ValueError, match=r"divisible by 32, got shape \(1, 100, 64, "):
        net.init(jax.random.PRNGKey(0), jnp.zeros((1, 100, 64, N_FEATURES)))


def test_config_round_trip_and_refusals():
    net = ValueFieldUNet(widths=(8, 16, 24), bottleneck_dilations=(1, 3))
    cfg = module_config(net)
    assert cfg["class"] == "ValueFieldUNet" and cfg["widths"] == [8, 16, 24]
    again = module_from_config(cfg)
    assert isinstance(again, ValueFieldUNet) and again.widths == (8, 16, 24)
    assert again.bottleneck_dilations == (1, 3)
    cnn = module_from_config(module_config(ValueFieldNet(width=5, dilations=(1, 2))))
    assert isinstance(cnn, ValueFieldNet) and cnn.width == 5 and cnn.dilations == (1, 2)
    with pytest.raises(ValueError, match="positive"):
        module_from_config({**cfg, "widths": [8, 0, 4]})
    with pytest.raises(ValueError, match="ValueFieldUNet"):
        module_from_config({**cfg, "class": "Other"})


def _request(side, rng):
    z = np.cumsum(rng.normal(size=(side, side)), axis=0) * 5 + 500
    ob = np.zeros((side, side), bool)
    ob[20:40, 30] = True
    w = COST_MODELS["elevation"].default_weight
    return PlanRequest(sample_id="t", elevation=z, obstacles=ob, start=(2, 2), goal=(side - 3, side - 5),
                       cost_model="elevation", cost_weight=w, graph=GraphSpec("elevation", w))


@pytest.mark.slow  # a planner with an exact fallback behind the network (about 30 s)
def test_checkpoint_round_trip_guides_a_whole_scene(tmp_path):
    net = ValueFieldUNet(widths=(4, 8, 8, 8, 8, 8))
    params = _init(net, 64)
    params = jax.tree_util.tree_map(  # non-trivial weights: a perturbed initialisation
        lambda a: a + 0.05 * jax.random.normal(jax.random.PRNGKey(2), a.shape), params)
    path = save_checkpoint(tmp_path / "unet", net, params, {"seed": 1})
    guide = load_guide(path)  # whole scene, no tiling
    req = _request(64, np.random.default_rng(0))
    np.testing.assert_array_equal(guide(req), NetworkGuide(net, params)(req))
    assert param_count(guide.params) == param_count(params)
    res = LearnedPlanner(guide, stages=[{"descent": {}}, {"guided_astar": {}}, {"exact": {}}]).plan(req)
    route = np.asarray(res.path)
    assert res.status == "ok" and tuple(route[0]) == req.start and tuple(route[-1]) == req.goal
    assert np.all(np.abs(np.diff(route, axis=0)).max(1) == 1)
    assert not req.obstacles[route[:, 0], route[:, 1]].any()


def test_train_config_builds_the_unet_and_keeps_the_64_recipe():
    """``model: unet`` (with ``widths``, ``bottleneck_dilations``) trains a U-Net; the
    shipped 64² recipe parses to the dilated CNN it always trained; a resolution the
    U-Net's levels do not divide is refused naming the key."""
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    from passage_jax.learned.train import TrainConfig  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    c64 = TrainConfig.from_dict(yaml.safe_load((root / "configs" / "train_value64.yaml").read_text()))
    assert c64.model == "dilated" and c64.module() == ValueFieldNet(width=24, dilations=(1, 2, 4, 8, 16, 1))
    u = TrainConfig(resolution=32, model="unet", widths=(4, 6, 8), bottleneck_dilations=(1, 2))
    assert u.module() == ValueFieldUNet(widths=(4, 6, 8), bottleneck_dilations=(1, 2))
    assert TrainConfig.from_dict(u.to_dict()) == u
    with pytest.raises(ValueError, match=r"key 'resolution': 34 is not divisible by 4"):
        TrainConfig(resolution=34, model="unet", widths=(4, 6, 8))
    TrainConfig(resolution=34, model="dilated", widths=(4, 6, 8))  # widths unused: any resolution


def test_a_unet_trains_and_its_checkpoint_rebuilds_it(tmp_path):
    """A few steps of a narrow U-Net on 16² crops: the loss falls, the checkpoint's model
    description rebuilds the same U-Net and its parameters give the same field."""
    from passage_jax.learned.checkpoint import load_checkpoint  # noqa: PLC0415
    from passage_jax.learned.train import TrainConfig, train, write_checkpoint  # noqa: PLC0415

    cfg = TrainConfig(name="u16", resolution=16, n_train=8, n_eval=4, steps=30, batch=4,
                      learning_rate=1e-2, warmup_steps=1, eval_every=10, seed=5, model="unet",
                      widths=(4, 4, 4), bottleneck_dilations=(1,))
    res = train(cfg)
    assert isinstance(res.module, ValueFieldUNet) and res.module.widths == (4, 4, 4)
    losses = [h["loss"] for h in res.history if h["loss"] is not None]  # steps 10, 20, 30
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    ck = load_checkpoint(write_checkpoint(res, tmp_path / "u16"))
    assert ck.module == res.module and ck.metadata["config"]["model"] == "unet"
    x = jax.random.normal(jax.random.PRNGKey(2), (1, 16, 16, N_FEATURES))
    np.testing.assert_array_equal(np.asarray(ck.module.apply(ck.params, x)),
                                  np.asarray(res.module.apply(res.params, x)))


@pytest.mark.slow  # two trainings; one U-Net training runs by default
def test_training_starts_from_the_init_checkpoint(tmp_path):
    """``init`` (``{seed}`` is the run's seed) starts the training from a checkpoint's
    parameters: the step-0 evaluation of the second run equals the first run's final one
    on the same held-out material, and the checkpoint records the parameters it started
    from; a checkpoint of another network, or none, is refused naming the key."""
    from passage_jax.learned.checkpoint import load_checkpoint  # noqa: PLC0415
    from passage_jax.learned.train import TrainConfig, init_checkpoint, train, write_checkpoint  # noqa: PLC0415

    cfg = TrainConfig(name="u16", resolution=16, n_train=8, n_eval=4, steps=20, batch=4,
                      learning_rate=1e-2, warmup_steps=1, eval_every=10, seed=5, model="unet",
                      widths=(4, 4, 4), bottleneck_dilations=(1,))
    first = train(cfg)
    meta_a = write_checkpoint(first, tmp_path / "u-5")
    second = train(TrainConfig.from_dict({**cfg.to_dict(), "steps": 10, "init": str(tmp_path / "u-{seed}")}))
    h0 = second.history[0]
    assert h0["step"] == 0
    for k in ("success_rate", "regret_median", "regret_p90"):
        assert h0[k] == first.metrics[k], (k, h0[k], first.metrics[k])
    a = load_checkpoint(meta_a)
    assert second.init == {"checkpoint": str(tmp_path / "u-5"), "params_sha256": a.checkpoint_id}
    b = load_checkpoint(write_checkpoint(second, tmp_path / "u-5b"))
    assert b.metadata["init"]["params_sha256"] == a.checkpoint_id and b.checkpoint_id != a.checkpoint_id
    other = TrainConfig.from_dict({**cfg.to_dict(), "widths": [4, 8, 4], "init": str(tmp_path / "u-5")})
    with pytest.raises(ValueError, match=r"key 'init': .*u-5' holds .*not the network this config trains"):
        init_checkpoint(other)
    with pytest.raises(ValueError, match=r"key 'init': .*nowhere-5' cannot be loaded"):
        train(TrainConfig.from_dict({**cfg.to_dict(), "init": str(tmp_path / "nowhere-{seed}")}))
    assert init_checkpoint(cfg) is None
