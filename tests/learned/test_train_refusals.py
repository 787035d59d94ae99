"""Hostile inputs to ``train`` and checkpoints: existing, shipped and unwritable targets,
bad config keys and documents, each refused in one line naming the file or key, and
refused before any training starts."""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import pytest

import cli.train
from cli.__main__ import main as cli_main
from passage_jax.fileio import sha256_file
from passage_jax.learned import CheckpointError, load_checkpoint
from passage_jax.learned.checkpoint import (
    SHIPPED_CHECKPOINT_DIR,
    check_checkpoint_target,
    checkpoint_files,
    save_checkpoint,
)
from passage_jax.learned.model import ValueFieldNet
from passage_jax.learned.train import CONFIG_MAX_BYTES, TrainConfig, TrainResult, write_checkpoint

#: the smallest config that trains (about 10 s here, most of it compilation)
SMALL = dict(name="t", resolution=16, n_train=2, n_eval=2, steps=2, batch=2, warmup_steps=1, width=2,
             dilations=[1], eval_every=1, seed=3)


@pytest.fixture(scope="module")
def fake_result():
    """A :class:`TrainResult` without training (a freshly initialised tiny module)."""
    module = ValueFieldNet(width=2, dilations=(1,))
    params = jax.device_get(module.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 7), jnp.float32)))
    return TrainResult(module=module, params=params, history=[], metrics={"param_count": 1},
                       seconds={"data": 0.0, "train": 0.0}, config=TrainConfig(**SMALL), steps=0)


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(SMALL))
    return path


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if the command reaches :func:`train`."""
    def refuse(*a, **k):
        raise AssertionError("train() was called")
    monkeypatch.setattr(cli.train, "train", refuse)


def _run(capsys, *argv) -> tuple[int, str]:
    code = cli_main(["train", "--no-progress", *map(str, argv)])
    err = capsys.readouterr().err.strip()
    return code, err


def _one_line(err: str) -> str:
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- #
# existing checkpoints
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("out, existing", [
    ("ck", "ck/params.msgpack"),
    ("ck", "ck/checkpoint.json"),
    ("ck.json", "ck.json"),
    ("ck.json", "ck.msgpack"),
])
def test_existing_checkpoint_refused_before_training(tmp_path, capsys, config_file, no_training,
                                                     out, existing):
    target = tmp_path / existing
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"old")
    t0 = time.perf_counter()
    code, err = _run(capsys, "--config", config_file, "--out", tmp_path / out)
    assert time.perf_counter() - t0 < 5
    assert code == 2 and str(target) in _one_line(err) and "already exists" in err and "--force" in err
    assert target.read_bytes() == b"old"


@pytest.mark.slow  # a real (tiny) training run
def test_force_replaces_an_existing_checkpoint(tmp_path, capsys, config_file):
    out = tmp_path / "ck"
    out.mkdir()
    (out / "params.msgpack").write_bytes(b"old")
    (out / "checkpoint.json").write_text("{}")
    code = cli_main(["train", "--no-progress", "--config", str(config_file), "--out", str(out),
                     "--seed", "4", "--force"])
    assert code == 0, capsys.readouterr().err
    ck = load_checkpoint(out)
    assert ck.metadata["seed"] == 4 and ck.checkpoint_id == sha256_file(out / "params.msgpack")


def test_write_checkpoint_refuses_an_existing_one(tmp_path, fake_result):
    path = write_checkpoint(fake_result, tmp_path / "ck")
    before = sha256_file(tmp_path / "ck" / "params.msgpack")
    with pytest.raises(CheckpointError, match=r"ck/checkpoint\.json already exists.*overwrite=True"):
        write_checkpoint(fake_result, tmp_path / "ck")
    (tmp_path / "ck" / "checkpoint.json").unlink()
    with pytest.raises(CheckpointError, match=r"ck/params\.msgpack already exists"):
        save_checkpoint(tmp_path / "ck", fake_result.module, fake_result.params)
    assert sha256_file(tmp_path / "ck" / "params.msgpack") == before
    assert write_checkpoint(fake_result, tmp_path / "ck", overwrite=True) == path
    assert load_checkpoint(path).checkpoint_id == before


# --------------------------------------------------------------------------- #
# the shipped checkpoint folder
# --------------------------------------------------------------------------- #

def _shipped_digests() -> dict:
    return {p.name: sha256_file(p) for p in sorted(SHIPPED_CHECKPOINT_DIR.iterdir())}


@pytest.mark.parametrize("out", ["value64-1234.json", "value64-9.json", "new-folder"])
def test_shipped_folder_refused_even_with_force(capsys, config_file, no_training, fake_result, out):
    before = _shipped_digests()
    target = SHIPPED_CHECKPOINT_DIR / out
    code, err = _run(capsys, "--config", config_file, "--out", target, "--force")
    assert code == 2 and str(SHIPPED_CHECKPOINT_DIR) in _one_line(err) and "shipped" in err
    with pytest.raises(CheckpointError, match="shipped checkpoint folder"):
        write_checkpoint(fake_result, target, overwrite=True)
    assert _shipped_digests() == before


def test_shipped_folder_refused_through_a_link(tmp_path, fake_result):
    link = tmp_path / "link"
    link.symlink_to(SHIPPED_CHECKPOINT_DIR)
    with pytest.raises(CheckpointError, match="shipped checkpoint folder"):
        check_checkpoint_target(link / "value64-1234.json", overwrite=True)


# --------------------------------------------------------------------------- #
# targets that cannot be written
# --------------------------------------------------------------------------- #

def test_out_that_is_a_file_refused(tmp_path, capsys, config_file, no_training):
    f = tmp_path / "a-file"
    f.write_text("x")
    code, err = _run(capsys, "--config", config_file, "--out", f)
    assert code == 2 and f"checkpoint folder {f} is a file" in _one_line(err)
    code, err = _run(capsys, "--config", config_file, "--out", f / "sub" / "ck.json")
    assert code == 2 and f"lies under {f}, which is a file" in _one_line(err)
    assert f.read_text() == "x"


def test_out_ending_in_msgpack_or_naming_a_folder_as_file_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"ck\.msgpack ends in \.msgpack"):
        check_checkpoint_target(tmp_path / "ck.msgpack")
    (tmp_path / "ck" / "checkpoint.json").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"checkpoint\.json is a folder"):
        check_checkpoint_target(tmp_path / "ck", overwrite=True)
    assert not (tmp_path / "ck.msgpack").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_location_refused(tmp_path, capsys, config_file, no_training):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, err = _run(capsys, "--config", config_file, "--out", ro / "sub" / "ck")
    finally:
        ro.chmod(0o755)
    assert code == 2 and f"{ro} is not writable" in _one_line(err)
    assert not (ro / "sub").exists()


def test_unwritable_location_refused(tmp_path, monkeypatch, capsys, config_file, no_training):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(ro) else real(p, mode, **k))
    code, err = _run(capsys, "--config", config_file, "--out", ro / "sub" / "ck")
    assert code == 2 and f"checkpoint folder {ro / 'sub' / 'ck'} cannot be created: {ro} is not writable" \
        in _one_line(err)
    assert not (ro / "sub").exists()


# --------------------------------------------------------------------------- #
# config documents
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("key, value, want", [
    ("batch", "sixteen", "is not an integer"),
    ("batch", True, "is not an integer"),
    ("steps", 2.5, "is not an integer"),
    ("n_train", 0, "is not a positive integer"),
    ("width", -3, "is not a positive integer"),
    ("resolution", 4, "is not an integer >= 8"),
    ("warmup_steps", -1, "is not a non-negative integer"),
    ("seed", -1, "is not an integer in [0, 2**63)"),
    ("learning_rate", "fast", "is not a finite number"),
    ("learning_rate", 0, "is not a positive number"),
    ("coverage_max", 1.5, "is not a number in [0, 1)"),
    ("move_temperature_m", None, "is not a finite number"),
    ("augment", 1, "is not true or false"),
    ("name", ["a"], "is not a string"),
    ("move_loss", "bogus", "is not one of ['difference', 'choice']"),
    ("dilations", "1,2", "is not a list of integers"),
    ("dilations", [1, 0], "is not a non-empty list of positive integers"),
    ("model", "transformer", "is not one of ['dilated', 'unet']"),
    ("clear_of", "none", "is not one of ['own', 'all']"),
    ("widths", [8], "is not a list of at least two positive integers"),
    ("bottleneck_dilations", [0], "is not a list of positive integers"),
    ("objectives", [], "is not a non-empty list of"),
    ("rasters", ["aletsch", "aletsch"], "is not a non-empty list of distinct shipped rasters"),
    ("rasters", "aletsch", "is not a list of strings"),
])
def test_wrong_value_names_key_and_value(key, value, want):
    with pytest.raises(ValueError) as e:
        TrainConfig.from_dict({**SMALL, key: value}, source="c.yaml")
    msg = str(e.value)
    assert msg.startswith(f"train config c.yaml key {key!r}: {value!r} ") and want in msg, msg
    assert "\n" not in msg


def test_long_and_nested_values_are_cut(tmp_path):
    bomb = [1] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 elements if expanded
    t0 = time.perf_counter()
    for d in ({"dilations": bomb}, {"name": 5, "x" * 5000: 1}, bomb):
        with pytest.raises(ValueError) as e:
            TrainConfig.from_dict(d)
        assert len(str(e.value)) < 900 and "\n" not in str(e.value)
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("text, want", [
    ("batch: sixteen\n", "key 'batch': 'sixteen' is not an integer"),
    ("- 1\n- 2\n", "the document must be a mapping of keys to values, got list"),
    ("just words\n", "the document must be a mapping of keys to values, got str"),
    ("stepz: 3\n", "unknown key(s) ['stepz']"),
])
def test_bad_config_document_named_in_one_line(tmp_path, capsys, no_training, text, want):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    code, err = _run(capsys, "--config", cfg, "--out", tmp_path / "ck")
    assert code == 2 and f"train config {cfg}" in _one_line(err) and want in err
    assert not (tmp_path / "ck").exists()


def test_binary_alias_bomb_and_oversized_configs_refused_quickly(tmp_path, capsys, no_training):
    binary = tmp_path / "cfg.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    code, err = _run(capsys, "--config", binary, "--out", tmp_path / "ck")
    assert code == 2 and str(binary) in _one_line(err)
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\ndilations: *i\n")
    t0 = time.perf_counter()
    code, err = _run(capsys, "--config", bomb, "--out", tmp_path / "ck")
    assert time.perf_counter() - t0 < 5
    assert code == 2 and str(bomb) in _one_line(err) and len(err) < 1000
    assert not (tmp_path / "ck").exists()
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (CONFIG_MAX_BYTES // 10 + 1) + "steps: 2\n")
    code, err = _run(capsys, "--config", big, "--out", tmp_path / "ck")
    assert code == 2 and str(big) in _one_line(err) and "limit" in err


def test_negative_seed_refused(tmp_path, capsys, config_file, no_training):
    code, err = _run(capsys, "--config", config_file, "--out", tmp_path / "ck", "--seed", "-1")
    assert code == 2 and "--seed -1" in _one_line(err) and "'seed'" in err
    assert not (tmp_path / "ck").exists()


def test_checkpoint_files_pairs():
    assert [p.name for p in checkpoint_files("a/ck")] == ["checkpoint.json", "params.msgpack"]
    assert [str(p) for p in checkpoint_files("a/ck.json")] == ["a/ck.json", "a/ck.msgpack"]


@pytest.mark.parametrize("init, want", [
    ("{tmp}/missing-{{seed}}", "missing-3' cannot be loaded"),
    ("shipped:value64-1234", "holds {'class': 'ValueFieldNet', 'width': 24"),
    ("shipped:nosuch-1234", "cannot be loaded (shipped checkpoint family 'nosuch'"),
])
def test_bad_init_refused_before_training(tmp_path, capsys, no_training, init, want):
    """An ``init`` checkpoint that cannot be read, or holds another network than the
    config's, is refused in one line naming the key, before any material is made."""
    path = tmp_path / "train.json"
    path.write_text(json.dumps({**SMALL, "init": init.format(tmp=tmp_path)}))
    code, err = _run(capsys, "--config", path, "--out", tmp_path / "out")
    assert code == 2 and "key 'init'" in err and want in err, err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()
