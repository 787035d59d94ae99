"""Multi-process launches (passage_jax.cluster) on the loopback interface: ``audit``,
the run admission's reference qualification and ``score`` across 2 (and 4) local CPU
processes give the files of a single-process launch; the draws of a bootstrap over the
global mesh equal one device's; a process that fails or is killed fails the launch,
naming it, with nothing written."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from score_support import copy_cohort, spec_dict

from passage_jax import cluster
from passage_jax.data import audit_dataset
from passage_jax.evaluate.score import score_run
from passage_jax.fileio import atomic_write_json
from passage_jax.run import admit, parse_spec, run_spec
from passage_jax.stats.bootstrap import paired_bootstrap, seed_mean_bootstrap

ROOT = Path(__file__).resolve().parents[1]
N_TASKS = 12
CHUNK = 4  # scenes per chunk: 3 chunks, shared out whole
SCORE_FILES = ("per_sample.npz", "metrics.json", "score_receipt.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv_of, n: int, *, timeout: float = 180, via_env: bool = False) -> list:
    """Start ``n`` processes (``argv_of(i, flags)`` is process i's command line after
    ``python``; with ``via_env`` the flags are empty and the PASSAGE_JAX_* variables say
    the same), wait for all; [(rc, stdout + stderr)] in process order."""
    port = free_port()
    # each process sees the test process's CPU devices (conftest: 4), so that the receipt's
    # device list matches the single-process score made here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "fixtures")]),
               JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    for k in (cluster.ENV_COORDINATOR, cluster.ENV_NUM_PROCESSES, cluster.ENV_PROCESS_ID):
        env.pop(k, None)

    def one(i):
        flags = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(n), "--process-id", str(i)]
        mine = dict(env)
        if via_env:
            mine.update({cluster.ENV_COORDINATOR: f"127.0.0.1:{port}",
                         cluster.ENV_NUM_PROCESSES: str(n), cluster.ENV_PROCESS_ID: str(i)})
            flags = []
        p = subprocess.run([sys.executable, *argv_of(i, flags)], capture_output=True, text=True,
                           env=mine, timeout=timeout, cwd=ROOT)
        return p.returncode, p.stdout + p.stderr

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(one, range(n)))


def cli(*args):
    return lambda i, flags: ["-m", "cli", *args, *flags]


def load(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def assert_npz_equal(a, b):
    a, b = load(a), load(b)
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """A copy of the shipped 64x64 test cohort, its single-process audit JSON, and a
    single-process run of 12 tasks (unscored copy kept) scored in this process, both in
    chunks of 4 scenes."""
    tmp = tmp_path_factory.mktemp("dist")
    cohort = copy_cohort(tmp / "cohort")
    audit = tmp / "audit-1.json"
    atomic_write_json(audit, audit_dataset(cohort, [64], ["test"], workers=2))
    spec = spec_dict("bfs", cohort, (1234,), n_samples=N_TASKS)
    (tmp / "spec.json").write_text(json.dumps(spec))
    parsed = parse_spec(spec)
    run_spec(parsed, tmp / "run-1", progress=False, admitted=admit(parsed, chunk=CHUNK))
    shutil.copytree(tmp / "run-1", tmp / "unscored")
    score_run(tmp / "run-1", chunk=CHUNK)
    return {"tmp": tmp, "cohort": cohort, "audit": audit, "spec": tmp / "spec.json"}


# ----------------------------------------------------------------------------- shares

def test_process_shares_are_contiguous_and_cover_every_item_once():
    for n in (0, 1, 5, 12, 13):
        for p in (1, 2, 3, 4, 7):
            shares = [cluster.process_share(n, process=i, processes=p) for i in range(p)]
            assert [j for s in shares for j in s] == list(range(n))
            sizes = [len(s) for s in shares]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError):
        cluster.process_share(4, process=2, processes=2)
    assert cluster.chunk_share(12, 4) == range(0, 12)  # one process: every chunk
    assert cluster.chunk_share(0, 4) == range(0, 0)


def test_launch_settings_from_flags_environment_and_launchers():
    env = {cluster.ENV_COORDINATOR: "10.0.0.1:1234", cluster.ENV_NUM_PROCESSES: "4",
           cluster.ENV_PROCESS_ID: "3"}
    assert cluster.launch_settings(environ=env) == cluster.Launch("environment", 4, 3, "10.0.0.1:1234")
    # flags win over the environment
    got = cluster.launch_settings("h:1", 2, 1, environ=env)
    assert (got.source, got.num_processes, got.process_id, got.coordinator) == ("flags", 2, 1, "h:1")
    assert cluster.launch_settings(environ={}).source == "single"
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NTASKS": "2",
             "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}
    got = cluster.launch_settings(environ=slurm)
    assert (got.source, got.num_processes, got.coordinator) == ("SLURM", 2, None)
    assert cluster.launch_settings(environ=dict(slurm, SLURM_NTASKS="1")).source == "single"
    with pytest.raises(cluster.ClusterError, match="missing: process id"):
        cluster.launch_settings("h:1", 2, None, environ={})
    with pytest.raises(cluster.ClusterError, match=r"outside \[0, 2\)"):
        cluster.launch_settings("h:1", 2, 2, environ={})
    with pytest.raises(cluster.ClusterError, match="HOST:PORT"):
        cluster.launch_settings("nohost", 2, 0, environ={})


def test_single_process_gather_is_the_identity():
    assert cluster.process_count() == 1 and cluster.is_writer()
    assert cluster.gather_shares({"a": 1}) == [{"a": 1}]

    def boom():
        raise KeyError("k")

    with pytest.raises(KeyError):  # unchanged without a launch
        cluster.run_share(boom)


# ----------------------------------------------------------------------------- two processes

@pytest.mark.slow  # run by CI after the default run (the default run stays under five minutes)
def test_audit_two_processes_equals_single(single):
    out = single["tmp"] / "audit-2.json"
    res = launch(lambda i, f: ["-m", "cli", "audit", "--dataset-path", str(single["cohort"]),
                               "--resolution", "64", "--split", "test", "--workers", "2",
                               "--json", str(out) if i == 0 else str(out) + f".{i}", *f], 2,
                 via_env=True)
    assert [rc for rc, _ in res] == [0, 0], res
    assert "process 1 of 2: share delivered" in res[1][1]  # the variables made a launch
    assert out.read_bytes() == single["audit"].read_bytes()
    assert not Path(str(out) + ".1").exists()  # process 1 writes nothing
    rep = json.loads(out.read_text())
    q = rep["summary"]["resolutions"]["64"]["splits"]["test"]["qualification"]
    assert q["n_tasks"] == 6 * 24 and q["n_qualified"] + q["n_censored"] == q["n_tasks"]


@pytest.mark.slow  # a larger sibling of a default-run check (the default run stays short)
def test_run_admission_and_score_two_processes_equal_single(single):
    tmp = single["tmp"]
    res = launch(cli("run", "--spec", str(single["spec"]), "--output", str(tmp / "run-2"),
                     "--no-progress", "--chunk", str(CHUNK)), 2)
    assert [rc for rc, _ in res] == [0, 0], res
    assert "process 1 of 2: references qualified" in res[1][1]
    assert_npz_equal(tmp / "run-1" / "seed-1234" / "references.npz",
                     tmp / "run-2" / "seed-1234" / "references.npz")

    folder = tmp / "score-2"
    shutil.copytree(tmp / "unscored", folder)
    res = launch(cli("score", "--run", str(folder), "--chunk", str(CHUNK)), 2)
    assert [rc for rc, _ in res] == [0, 0], res
    one, two = tmp / "run-1" / "seed-1234", folder / "seed-1234"
    assert (one / "per_sample.npz").read_bytes() == (two / "per_sample.npz").read_bytes()
    assert (one / "metrics.json").read_bytes() == (two / "metrics.json").read_bytes()
    r1, r2 = (json.loads((d / "score_receipt.json").read_text()) for d in (one, two))
    differ = {k for k in r1 if r1[k] != r2.get(k)}
    # what a process compiled depends on its caches (the receipt's compile counts)
    assert differ <= {"scored_utc", "run_folder", "compilation"} and set(r1) == set(r2)
    assert r1["outputs"] == r2["outputs"]


_FAULT = """
import os, signal, sys
import passage_jax.evaluate.score._pipeline as s
def fault(*a, **k):
    if {kill}:
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("injected scoring fault")
s.RouteStream.add = fault
from cli.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("kill", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["raises", "killed"])
def test_a_failing_process_fails_the_launch_naming_it(single, kill):
    folder = single["tmp"] / f"fault-{kill}"
    shutil.copytree(single["tmp"] / "unscored", folder)

    def argv(i, flags):
        args = ["score", "--run", str(folder), "--chunk", str(CHUNK), *flags]
        return ["-m", "cli", *args] if i == 0 else ["-c", _FAULT.format(kill=kill), *args]

    (rc0, out0), (rc1, out1) = launch(argv, 2)
    assert rc0 != 0 and rc1 != 0
    if kill:
        assert rc1 == -9
        assert "process(es) 1 of 2 never reached it" in out0 and "nothing was written" in out0
    else:  # every process names process 1 and its scenes
        ids = json.loads((folder / "seed-1234" / "manifest.json").read_text())["data"]["sample_ids"]
        for out in (out0, out1):
            assert "score: process 1 of 2:" in out and "injected scoring fault" in out
            assert f"tasks 4-7 (scenes {ids[4]} to {ids[7]})" in out
    for name in SCORE_FILES:  # nothing complete-looking, no temporaries
        assert not (folder / "seed-1234" / name).exists()
    assert not [p for p in (folder / "seed-1234").iterdir() if p.name.startswith(".")]


_BOOT = """
import json, sys
import jax
import numpy as np
from passage_jax import cluster
from passage_jax.stats import paired_bootstrap, seed_mean_bootstrap
from passage_jax.stats.draws import draw_placement
cluster.initialize(cluster.launch_settings(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
place = draw_placement("global")
assert place[2] == jax.device_count() > jax.local_device_count()
assert not place[0].is_fully_addressable
exec(sys.argv[4])
result = draws("global")  # every process makes the call
if cluster.is_writer():
    with open(sys.argv[5], "w") as f:
        json.dump(result, f)
"""

_DRAWS = """
def draws(sharding):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=300), rng.normal(size=300)
    a[::37] = np.nan
    blocks = rng.integers(0, 17, size=300)
    A, B = rng.normal(size=(3, 300)), rng.normal(size=(3, 300))
    out = {}
    for stat in ("mean", "p90"):
        r = paired_bootstrap(a, b, stat, blocks, n_bootstrap=1001, seed=3, return_draws=True,
                             nan_policy="omit", sharding=sharding)
        out[stat] = np.asarray(r.draws).tolist()
        r = seed_mean_bootstrap(A, B, stat, blocks, n_bootstrap=513, seed=5, return_draws=True,
                                sharding=sharding)
        out["seed_" + stat] = np.asarray(r.draws).tolist()
    return out
"""


@pytest.mark.slow  # a larger sibling of a default test (the suite stays under five minutes)
def test_bootstrap_over_the_global_mesh_equals_one_device(tmp_path):
    out = tmp_path / "draws.json"
    port = free_port()
    res = launch(lambda i, f: ["-c", _BOOT, f"127.0.0.1:{port}", "2", str(i), _DRAWS, str(out)], 2)
    assert [rc for rc, _ in res] == [0, 0], res
    got = json.loads(out.read_text())
    ns = {"np": np, "paired_bootstrap": paired_bootstrap, "seed_mean_bootstrap": seed_mean_bootstrap}
    exec(_DRAWS, ns)
    want = ns["draws"](None)
    assert set(got) == set(want)
    for k in want:
        assert np.isfinite(np.asarray(want[k], float)).all(), k
        np.testing.assert_array_equal(np.asarray(got[k], float), np.asarray(want[k], float), err_msg=k)


@pytest.mark.slow
def test_four_processes_equal_single(single):
    tmp = single["tmp"]
    out = tmp / "audit-4.json"
    res = launch(lambda i, f: ["-m", "cli", "audit", "--dataset-path", str(single["cohort"]),
                               "--resolution", "64", "--split", "test", "--workers", "1",
                               "--json", str(out), *f], 4)
    assert [rc for rc, _ in res] == [0, 0, 0, 0], res
    assert out.read_bytes() == single["audit"].read_bytes()
    res = launch(cli("run", "--spec", str(single["spec"]), "--output", str(tmp / "run-4"),
                     "--no-progress", "--chunk", str(CHUNK)), 4)
    assert [rc for rc, _ in res] == [0] * 4, res
    assert_npz_equal(tmp / "run-1" / "seed-1234" / "references.npz",
                     tmp / "run-4" / "seed-1234" / "references.npz")
    folder = tmp / "score-4"
    shutil.copytree(tmp / "unscored", folder)
    res = launch(cli("score", "--run", str(folder), "--chunk", str(CHUNK)), 4)
    assert [rc for rc, _ in res] == [0] * 4, res
    for name in ("per_sample.npz", "metrics.json"):
        assert ((tmp / "run-1" / "seed-1234" / name).read_bytes()
                == (folder / "seed-1234" / name).read_bytes())
