"""The persistent compilation cache works in the README's plain install.

JAX reads no entry of a bounded cache without the ``filelock`` package (it warns "Error
reading persistent compilation cache entry ... Please install the filelock package" and
compiles anew). ``filelock`` is a runtime dependency, and where it is missing anyway the
cache is switched on unbounded (``passage_jax.compilation``) and ``doctor`` names the
problem. Checked end to end: a second ``score`` of a copy of the same run, in a fresh
cache folder, reads its kernels from the cache (``cache_hits`` > 0 in
``score_receipt.json``) and prints no cache warning — with ``filelock`` installed and with
it hidden from the process.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from passage_jax.compilation import CACHE_DIR_ENV, NO_CACHE_ENV, cache_problems
from tests.evaluate.score.test_pipeline import _unpack

ROOT = Path(__file__).resolve().parents[1]
HIDE_FILELOCK = "import sys; sys.modules['filelock'] = None; "
CLI = "import runpy, sys; sys.argv = ['cli'] + sys.argv[1:]; runpy.run_module('cli', run_name='__main__')"


def _env(cache: Path) -> dict:
    """The environment of a user's shell: no JAX cache settings inherited from the test
    session, a fresh cache folder of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JAX_COMPILATION_CACHE") and not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop(NO_CACHE_ENV, None)
    env[CACHE_DIR_ENV] = str(cache)
    return env


def _score(run: Path, cache: Path, prelude: str = "") -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", prelude + CLI, "score", "--run", str(run),
                           "--dataset-path", "shipped"], cwd=ROOT, env=_env(cache),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    receipt = json.loads((run / "seed-1234" / "score_receipt.json").read_text())
    return receipt["compilation"], proc.stdout + proc.stderr


def test_the_plain_install_requires_filelock():
    """The installed distribution's own metadata (what `pip install -e .` resolved)."""
    requires = importlib.metadata.requires("passage_jax") or []
    plain = [r for r in requires if "extra ==" not in r]
    assert any(re.match(r"filelock\b", r) for r in plain), plain


@pytest.mark.parametrize("prelude", ["", pytest.param(HIDE_FILELOCK, marks=pytest.mark.slow)],
                         ids=["filelock", "no-filelock"])
def test_a_second_score_reads_its_kernels_from_the_cache(tmp_path, prelude):
    runs = _unpack(tmp_path / "golden") / "runs"
    cache = tmp_path / "cache"
    first_run = shutil.copytree(runs / "bfs64", tmp_path / "first")
    second_run = shutil.copytree(runs / "bfs64", tmp_path / "second")
    first, out1 = _score(first_run, cache, prelude)
    second, out2 = _score(second_run, cache, prelude)
    assert first["compiled"] > 0, first
    assert second["cache_hits"] > 0 and second["compiled"] < first["compiled"], (first, second)
    for out in (out1, out2):
        assert "filelock" not in out and "compilation cache" not in out.lower(), out[-2000:]


def test_doctor_names_a_cache_that_cannot_be_used(tmp_path, monkeypatch):
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    assert cache_problems(tmp_path / "cache") == []
    monkeypatch.setitem(sys.modules, "filelock", None)
    [problem] = cache_problems(tmp_path / "cache")
    assert "filelock" in problem
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problems = cache_problems(blocker / "cache")
    assert len(problems) == 2 and str(blocker / "cache") in problems[1]
    monkeypatch.setenv(NO_CACHE_ENV, "1")
    assert cache_problems(blocker / "cache") == []  # switched off on purpose: no problem


def test_doctor_json_reports_the_problem_and_fails(tmp_path):
    env = _env(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", HIDE_FILELOCK + CLI, "doctor", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["ok"] is False
    assert any("filelock" in p for p in report["compilation_cache"]["problems"])
    ok = subprocess.run([sys.executable, "-m", "cli", "doctor", "--json"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
    assert json.loads(ok.stdout)["compilation_cache"]["problems"] == []
