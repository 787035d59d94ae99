"""Session runs across processes (``passage_jax.run.execution.seed``): a two-process
native-session ``run`` on the loopback interface equals a one-process run of the same
spec but for where each request ran and how long it took; each process runs its own
session (its own warm-up calls) on its contiguous share of whole chunks of the roster;
a process that dies or raises fails the launch naming it; ``run --resume`` with both
processes completes a failed launch, and shares out the missing records of a
single-process run that was killed mid-seed."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest
from session_planners import read_log

from passage_jax import cluster
from passage_jax.data.writer import write_split
from passage_jax.evaluate import score_run
from passage_jax.protocol.records import read_requests
from passage_jax.run import admit, parse_spec, run_spec
from passage_jax.run.execution import scan_journal

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "fixtures"
SEEDS = (1234, 2026)
KINDS = F.KINDS * 2  # six test scenes, ids 0000000000 .. 0000000005
N_TASKS = len(KINDS)
CHUNK = 2  # three chunks: process 0 takes one, process 1 two
WARMUP = 2
WARM_ID = "0000000010"  # the first validation scene
#: record fields that are measured or say where the request ran, not what was planned
TIMED = {"latency_ms", "returned_ms", "validation_recost_ms"}
PLACED = {"process_index", "host", "device"}
SERIES_KEYS = ("latency_warmup", "latency_repeats", "quality_repeat_index")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, n: int = 2, timeout: float = 300) -> list[tuple[int, str]]:
    """``python -m cli <args>`` as process ``i`` of an ``n``-process launch on 127.0.0.1,
    for every ``i``; [(exit status, stdout + stderr)] in process order."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]),
               JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    for k in (cluster.ENV_COORDINATOR, cluster.ENV_NUM_PROCESSES, cluster.ENV_PROCESS_ID):
        env.pop(k, None)

    def one(i):
        p = subprocess.run([sys.executable, "-m", "cli", *map(str, args), "--coordinator",
                            f"127.0.0.1:{port}", "--num-processes", str(n), "--process-id", str(i)],
                           capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
        return p.returncode, p.stdout + p.stderr

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(one, range(n)))


def owners(n_tasks: int, chunk: int, first: int = 0, processes: int = 2) -> dict:
    """{task: process} when the whole chunks holding tasks ``first ..`` are shared out,
    process ``i`` of ``P`` taking chunks ``[n*i // P, n*(i+1) // P)`` of them."""
    chunks = list(range(first // chunk, -(-n_tasks // chunk)))
    out = {}
    for i in range(processes):
        for c in chunks[len(chunks) * i // processes:len(chunks) * (i + 1) // processes]:
            for t in range(max(first, c * chunk), min(n_tasks, (c + 1) * chunk)):
                out[t] = i
    return out


def spec_dict(root, calls: Path, **kwargs) -> dict:
    d = {k: v for k, v in F.spec_dict(root).items() if k not in SERIES_KEYS}
    d.update(timing_profile="native_raw_path_persistent_v1", session_warmup=WARMUP, seeds=list(SEEDS),
             inference="session_planners:make_crash_once",
             inference_kwargs={"folder": str(calls), **kwargs})
    return d


def write_spec(tmp: Path, name: str, root, **over) -> tuple[Path, Path]:
    """A spec file and the (existing) folder its planner logs its calls to."""
    calls = tmp / f"calls-{name}"
    calls.mkdir()
    d = spec_dict(root, calls)
    d.update(over)
    path = tmp / f"spec-{name}.json"
    path.write_text(json.dumps(d))
    return path, calls


def load(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def manifest(folder) -> dict:
    return json.loads((Path(folder) / "manifest.json").read_text())


def planned(rec: dict, ignore=()) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMED | PLACED | set(ignore)}


def assert_same_quality(one: Path, two: Path, ignore=()) -> None:
    """Every seed of run ``two`` equals run ``one`` (both scored) in everything but the
    measured times and the placement (and the record fields ``ignore``)."""
    for seed in SEEDS:
        a, b = one / f"seed-{seed}", two / f"seed-{seed}"
        pa, pb = load(a / "per_sample.npz"), load(b / "per_sample.npz")
        assert sorted(pa) == sorted(pb)
        compared = [k for k in pa if "latency" not in k]
        assert len(compared) > 10  # the quality fields, not just a few
        for k in compared:
            assert pa[k].dtype == pb[k].dtype, k
            np.testing.assert_array_equal(pa[k], pb[k], err_msg=f"seed {seed}: per_sample {k}")
        for name in ("paths.npz", "references.npz"):
            za, zb = load(a / name), load(b / name)
            assert sorted(za) == sorted(zb)
            for k in za:
                np.testing.assert_array_equal(za[k], zb[k], err_msg=f"seed {seed}: {name} {k}")
        ra, rb = read_requests(a / "requests.jsonl"), read_requests(b / "requests.jsonl")
        assert len(ra) == len(rb) == N_TASKS
        for x, y in zip(ra, rb):
            assert list(x) == list(y)
            assert planned(x, ignore) == planned(y, ignore)


def write_cohort(root: Path) -> None:
    write_split(root, F.N, "test", [F.make_row(i, k) for i, k in enumerate(KINDS)], rows_per_shard=2)
    write_split(root, F.N, "validation", [F.make_row(10 + i, k, "validation")
                                          for i, k in enumerate(F.KINDS)], rows_per_shard=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A cohort of six 12x12 test scenes with a validation split; a one-process session
    run of it made here and a two-process one made by two CLI processes, both admitted
    in chunks of two scenes, both scored here."""
    tmp = tmp_path_factory.mktemp("session-processes")
    cohort = tmp / "cohort"
    write_cohort(cohort)
    spec1, calls1 = write_spec(tmp, "one", cohort)
    parsed = parse_spec(json.loads(spec1.read_text()))
    run_spec(parsed, tmp / "one", progress=False, admitted=admit(parsed, chunk=CHUNK))
    score_run(tmp / "one", chunk=CHUNK)
    spec2, calls2 = write_spec(tmp, "two", cohort)
    res = launch(["run", "--spec", spec2, "--output", tmp / "two", "--no-progress", "--chunk", CHUNK])
    assert [rc for rc, _ in res] == [0, 0], res
    score_run(tmp / "two", chunk=CHUNK)
    return {"tmp": tmp, "cohort": cohort, "one": tmp / "one", "two": tmp / "two", "outputs": res,
            "calls_two": calls2}


# ----------------------------------------------------------------------------- shares

def test_chunk_share_from_takes_whole_chunks_of_the_missing_tail():
    for n in (0, 1, 5, 6, 13):
        for chunk in (1, 2, 4):
            for first in range(n + 1):
                for p in (1, 2, 3):
                    want = owners(n, chunk, first, p)
                    got = {t: i for i in range(p)
                           for t in cluster.chunk_share_from(first, n, chunk, process=i, processes=p)}
                    assert got == want, (n, chunk, first, p)
            assert cluster.chunk_share_from(0, n, chunk) == cluster.chunk_share(n, chunk)
    with pytest.raises(ValueError):
        cluster.chunk_share_from(7, 6, 2)


# ----------------------------------------------------------------------------- two processes

def test_two_process_session_run_equals_one_process(runs):
    assert_same_quality(runs["one"], runs["two"])
    assert "run: process 1 of 2: its shares of 2 seed(s) run and delivered" in runs["outputs"][1][1]
    own = owners(N_TASKS, CHUNK)
    assert set(own.values()) == {0, 1}
    roster = [r["sample_id"] for r in read_requests(runs["one"] / "seed-1234" / "requests.jsonl")]
    for seed in SEEDS:
        one, two = runs["one"] / f"seed-{seed}", runs["two"] / f"seed-{seed}"
        assert all(r["process_index"] == 0 for r in read_requests(one / "requests.jsonl"))
        assert manifest(one)["session"]["n_sessions"] == 1
        recs = read_requests(two / "requests.jsonl")
        assert [r["record"] for r in recs] == list(range(N_TASKS))  # roster order, renumbered
        assert [r["process_index"] for r in recs] == [own[r["task_index"]] for r in recs]
        s = manifest(two)["session"]
        assert s["n_sessions"] == 2 and len(s["sessions"]) == 2
        assert [x["process_index"] for x in s["sessions"]] == [0, 1]
        assert [x["first_record"] for x in s["sessions"]] == [min(t for t in own if own[t] == i)
                                                              for i in (0, 1)]
        assert s["identical_hardware"] is True  # both processes on this machine
        # each on a device of its own (process 0's first device is not process 1's)
        assert s["sessions"][0]["device"] != s["sessions"][1]["device"]
        assert all(len(x["warmup_ms"]) == WARMUP and x["warm_complete"] for x in s["sessions"])
        assert all(r["warm_complete"] is True for r in recs)
        for r in recs:  # each record names the session that served it
            mine = s["sessions"][r["process_index"]]
            assert (r["host"], r["device"]) == (mine["host"], mine["device"]) \
                and r["host"] == socket.gethostname()
    # each process ran its own session: its warm-up calls, then its share, for each seed
    by_pid: dict = {}
    for c in read_log(runs["calls_two"] / "calls.jsonl"):
        by_pid.setdefault(c["pid"], []).append(c["id"])
    want = [[x for _ in SEEDS for x in [WARM_ID] * WARMUP + [roster[t] for t in sorted(own)
                                                             if own[t] == i]] for i in (0, 1)]
    assert sorted(by_pid.values()) == sorted(want)


@pytest.mark.slow  # run by CI after the default run (the default run stays under five minutes)
def test_a_killed_process_fails_the_launch_and_resume_completes(runs):
    tmp = runs["tmp"]
    victim = next(t for t, i in owners(N_TASKS, CHUNK).items() if i == 1)
    sid = f"{victim:010d}"
    spec, calls = write_spec(tmp, "killed", runs["cohort"],
                             inference_kwargs_by_seed={"2026": {"crash_ids": [sid]}})
    out = tmp / "killed"
    args = ["run", "--spec", spec, "--output", out, "--no-progress", "--chunk", CHUNK]
    (rc0, out0), (rc1, out1) = launch(args)
    assert rc1 == 3, out1  # the planner ended process 1 on scene `sid` of seed 2026
    assert rc0 == 2, out0
    assert "seed 2026: gathering the shares" in out0
    assert "process(es) 1 of 2 never reached it" in out0
    # seed 1234 is complete and durable; seed 2026's shares never arrived
    assert (out / "seed-1234" / "manifest.json").is_file() and not (out / "seed-2026").exists()
    assert scan_journal(out / ".seed-2026.partial" / "records.journal").count == 0
    kept = (out / "seed-1234" / "manifest.json").read_bytes()

    res = launch([*args, "--resume"])
    assert [rc for rc, _ in res] == [0, 0], res
    assert "seed 1234: complete" in res[0][1]
    assert (out / "seed-1234" / "manifest.json").read_bytes() == kept
    score_run(out, chunk=CHUNK)
    assert_same_quality(runs["one"], out, ignore=("resumed",))
    recs = read_requests(out / "seed-2026" / "requests.jsonl")
    assert [r["resumed"] for r in recs] == [True] + [False] * (N_TASKS - 1)
    s = manifest(out / "seed-2026")["session"]
    assert [x["process_index"] for x in s["sessions"]] == [0, 1]  # the lost shares left nothing


@pytest.mark.slow  # a whole two-process launch; the share that is killed runs by default
def test_a_process_whose_share_raises_fails_the_launch_naming_it(runs):
    tmp = runs["tmp"]
    spec, _ = write_spec(tmp, "raises", runs["cohort"])
    d = json.loads(spec.read_text())
    d["inference_kwargs"]["fail_build_in"] = 1
    spec.write_text(json.dumps(d))
    out = tmp / "raises"
    res = launch(["run", "--spec", spec, "--output", out, "--no-progress", "--chunk", CHUNK])
    mine = sorted(t for t, i in owners(N_TASKS, CHUNK).items() if i == 1)
    where = (f"run: process 1 of 2: seed 1234: tasks {mine[0]}-{mine[-1]} (scenes {mine[0]:010d} "
             f"to {mine[-1]:010d})")
    for rc, text in res:  # every process fails, naming process 1, its tasks and the error
        assert rc == 2, text
        assert where in text and "injected construction failure in process 1" in text, text
    # a new run that failed before its first durable record leaves only its launch records
    assert sorted(p.name for p in out.iterdir()) == ["resolved_protocol.0.json", "resolved_protocol.json"]


_KILLED_ALONE = """
import sys
from resume_driver import arm
from passage_jax.run import admit, load_spec, run_spec
arm(sys.argv[3])
spec = load_spec(sys.argv[1])
run_spec(spec, sys.argv[2], progress=False, admitted=admit(spec, chunk=int(sys.argv[4])))
"""


@pytest.mark.slow  # a larger sibling of a default test (the suite stays under five minutes)
def test_two_processes_resume_a_one_process_run_sharing_the_missing_tail(runs):
    tmp = runs["tmp"]
    spec, _ = write_spec(tmp, "tail", runs["cohort"])
    out = tmp / "tail"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
    durable = 3  # planner calls: the warm-up calls, records 0..2, killed inside record 3
    p = subprocess.run([sys.executable, "-c", _KILLED_ALONE, str(spec), str(out),
                        f"planner:{WARMUP + durable + 1}", str(CHUNK)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == -9, p.stderr[-2000:]
    assert scan_journal(out / ".seed-1234.partial" / "records.journal").count == durable
    res = launch(["run", "--spec", spec, "--output", out, "--no-progress", "--chunk", CHUNK, "--resume"])
    assert [rc for rc, _ in res] == [0, 0], res
    score_run(out, chunk=CHUNK)
    assert_same_quality(runs["one"], out, ignore=("resumed",))
    own = owners(N_TASKS, CHUNK, first=durable)  # the chunks holding records 3..5
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert [r["process_index"] for r in recs] == [0] * durable + [own[t] for t in range(durable, N_TASKS)]
    assert [r["resumed"] for r in recs] == [i == durable for i in range(N_TASKS)]
    s = manifest(out / "seed-1234")["session"]
    # the killed session, then one per process of the resume
    assert [(x["process_index"], x["first_record"]) for x in s["sessions"]] == \
        [(0, 0)] + [(i, min(t for t in own if own[t] == i)) for i in (0, 1)]
    assert manifest(out / "seed-1234")["resume"]["recovered_records"] == durable


# ----------------------------------------------------------------------------- batched shares

BATCH = 4  # six tasks: a batch of four, then one of two live scenes and two of padding


def test_batched_shares_are_whole_batches_counted_from_the_first_missing_record():
    from types import SimpleNamespace

    from passage_jax.run.execution import share_of

    for n in (0, 1, 5, 6, 13):
        for size in (1, 2, 4):
            admitted = SimpleNamespace(spec=SimpleNamespace(batched=True, batch_size=size),
                                       tasks=SimpleNamespace(chunk=3))
            for first in range(n + 1):
                for p in (1, 2, 3):
                    shares = [share_of(admitted, range(n), first, process=i, processes=p)
                              for i in range(p)]
                    # contiguous, in process order, covering the missing records once
                    assert [t for s in shares for t in s] == list(range(first, n)), (n, size, first, p)
                    # every share starts on a batch boundary of a single process's pass
                    # from `first`, and only the seed's last share ends off one
                    assert all((s.start - first) % size == 0 for s in shares)
                    assert all((s.stop - first) % size == 0 for s in shares if s.stop < n)
                    # as even as whole batches allow: shares differ by at most one batch
                    counts = [-(-len(s) // size) for s in shares]
                    assert max(counts) - min(counts) <= 1


@pytest.fixture(scope="module")
def batched_runs(tmp_path_factory):
    """The six-scene cohort run under the batched procedure (batches of four, the
    looped breadth-first batch planner): in one process here, and by a two-process CLI
    launch; both scored."""
    tmp = tmp_path_factory.mktemp("batched-processes")
    cohort = tmp / "cohort"
    write_cohort(cohort)
    d = {k: v for k, v in F.spec_dict(cohort).items() if k not in SERIES_KEYS}
    d.update(timing_profile="batched_v1", batch_size=BATCH, seeds=list(SEEDS),
             inference="batch_planners:make_looped", inference_kwargs={"planner": "bfs"})
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(d))
    parsed = parse_spec(d)
    run_spec(parsed, tmp / "one", progress=False, admitted=admit(parsed, chunk=CHUNK))
    res = launch(["run", "--spec", spec, "--output", tmp / "two", "--no-progress", "--chunk", CHUNK])
    assert [rc for rc, _ in res] == [0, 0], res
    for k in ("one", "two"):
        score_run(tmp / k, chunk=CHUNK)
    return {"one": tmp / "one", "two": tmp / "two", "outputs": res}


def test_two_process_batched_run_shares_whole_batches_and_equals_one_process(batched_runs):
    one, two = batched_runs["one"], batched_runs["two"]
    assert_same_quality(one, two, ignore=("batch_ms", "worker"))
    assert "run: process 1 of 2: its shares of 2 seed(s) run and delivered" in batched_runs["outputs"][1][1]
    for seed in SEEDS:
        ra = read_requests(one / f"seed-{seed}" / "requests.jsonl")
        rb = read_requests(two / f"seed-{seed}" / "requests.jsonl")
        # the batches a single process runs: [0, 4) and [4, 6) padded; process 0 ran the
        # first, process 1 the second
        assert [r["batch_first"] for r in ra] == [r["batch_first"] for r in rb] == [0] * 4 + [4] * 2
        assert [r["batch_live"] for r in rb] == [4] * 4 + [2] * 2
        assert [r["process_index"] for r in ra] == [0] * N_TASKS
        assert [r["process_index"] for r in rb] == [0] * 4 + [1] * 2
        # each record's batch time is its process's own batch
        assert len({r["batch_ms"] for r in rb[:4]}) == 1 and len({r["batch_ms"] for r in rb[4:]}) == 1
        b = manifest(two / f"seed-{seed}")["batched"]
        assert [x["process_index"] for x in b["builds"]] == [0, 1]
        assert [x["first_record"] for x in b["builds"]] == [0, 4]
        assert b["builds"][0]["device"] != b["builds"][1]["device"]
        assert all(len(x["warmup_ms"]) == 2 for x in b["builds"])  # each process warmed up
        assert (b["n_batches"], b["n_scenes"]) == (2, N_TASKS)
        assert manifest(one / f"seed-{seed}")["batched"]["n_batches"] == 2
