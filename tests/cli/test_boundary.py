"""The CLI's error boundary (one named line, a non-zero exit, a traceback only on
request) and its persistent compilation cache (on for every command, per user,
moved or switched off by environment variables; the library alone changes nothing)."""
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli.__main__ as M
from passage_jax.compilation import (
    CACHE_DIR_ENV,
    NO_CACHE_ENV,
    CompileCounter,
    cache_usage,
    compile_stats,
    default_cache_dir,
)

ROOT = Path(__file__).resolve().parents[2]


def _sub(args, env_over, timeout=240):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "PASSAGE_JAX_CACHE",
                                "PASSAGE_JAX_NO_COMPILE"))}
    env.update(env_over)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_os_error_is_one_line_naming_the_file():
    e = OSError(errno.ENOSPC, "No space left on device", "/data/run/seed-1/paths.npz")
    line, code = M.failure_line("run", e)
    assert code == M.EXIT_ERROR
    assert line.startswith("run: /data/run/seed-1/paths.npz: no space left on device [ENOSPC]")
    e = IsADirectoryError(errno.EISDIR, "Is a directory", "/x/cmp.json")
    line, _ = M.failure_line("compare", e)
    assert "/x/cmp.json" in line and "Is a directory" in line and "\n" not in line


def test_internal_error_is_named_as_one_line_with_its_own_exit_code():
    line, code = M.failure_line("score", KeyError("pairs"))
    assert code == M.EXIT_INTERNAL and code != M.EXIT_ERROR
    assert line.startswith("score: internal error KeyError: 'pairs'") and "--debug" in line
    long = ValueError("v" * 5000 + "\nsecond line")
    line, code = M.failure_line("run", long)
    assert code == M.EXIT_ERROR and len(line) <= 600 and "\n" not in line


def test_boundary_catches_what_a_command_raises(monkeypatch, capsys):
    import cli.init_spec as cmd

    def boom(args):
        raise OSError(errno.EACCES, "Permission denied", "/root/x.yaml")
    monkeypatch.setattr(cmd, "main", boom)
    assert M.main(["init-spec", "--out", "x.yaml"]) == M.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.strip() == ("init-spec: /root/x.yaml: Permission denied [EACCES]; nothing incomplete "
                           "was accepted as a result")
    # --debug (after the command or before it) and the environment variable re-raise
    for argv in (["init-spec", "--out", "x.yaml", "--debug"], ["--debug", "init-spec", "--out", "x"]):
        with pytest.raises(OSError):
            M.main(argv)
    monkeypatch.setenv(M.DEBUG_ENV, "1")
    with pytest.raises(OSError):
        M.main(["init-spec", "--out", "x.yaml"])


def test_real_command_failure_has_no_traceback(tmp_path):
    (tmp_path / "f").write_text("a file, not a folder")
    p = _sub(["-m", "cli", "score", "--run", str(tmp_path / "f" / "run")],
             {NO_CACHE_ENV: "1"})
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert str(tmp_path / "f") in p.stderr


def test_library_import_changes_no_jax_setting(tmp_path):
    code = ("import jax, passage_jax.metrics, passage_jax.evaluate, passage_jax.run; "
            "print(jax.config.jax_compilation_cache_dir)")
    p = _sub(["-c", code], {"XDG_CACHE_HOME": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "None"
    assert not (tmp_path / "passage_jax").exists()


@pytest.mark.slow  # run by CI after the default run (the default run stays under five minutes)
def test_cli_fills_the_per_user_cache_and_reuses_it(tmp_path):
    xdg = tmp_path / "xdg"
    args = ["-m", "cli", "audit", "--dataset-path", "shipped", "--resolution", "64", "--json",
            str(tmp_path / "a1.json")]
    p = _sub(args, {"XDG_CACHE_HOME": str(xdg)})
    assert p.returncode == 0, p.stderr
    usage = cache_usage(xdg / "passage_jax" / "jax")
    assert usage["entries"] > 0 and usage["bytes"] > 0
    # moved by PASSAGE_JAX_CACHE_DIR; switched off by PASSAGE_JAX_NO_COMPILE_CACHE
    moved = tmp_path / "moved"
    args[-1] = str(tmp_path / "a2.json")
    assert _sub(args, {CACHE_DIR_ENV: str(moved)}).returncode == 0
    assert cache_usage(moved)["entries"] == usage["entries"]
    off = tmp_path / "off"
    args[-1] = str(tmp_path / "a3.json")
    assert _sub(args, {CACHE_DIR_ENV: str(off), NO_CACHE_ENV: "1"}).returncode == 0
    assert not off.exists()
    # the cached executables give the same audit
    assert (json.loads((tmp_path / "a1.json").read_text())["scenes"]
            == json.loads((tmp_path / "a2.json").read_text())["scenes"])


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "passage_jax" / "jax"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"


def test_compile_counter_counts_new_shapes_only():
    import jax
    import jax.numpy as jnp
    import numpy as np

    f = jax.jit(lambda x: jnp.cumsum(x * 3.0 + 1.0))
    with CompileCounter() as c:
        f(np.ones(7, np.float32))
        f(np.ones(7, np.float32))
        f(np.ones(9, np.float32))
    assert c.stats.compilations == 2
    with CompileCounter() as again:
        f(np.ones(9, np.float32))
    assert again.stats.compilations == 0
    assert compile_stats().compilations >= 2
