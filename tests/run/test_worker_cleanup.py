"""Supervised workers leave no process behind: whatever a planner starts (a plain
child, a ``start_new_session=True`` child, a double-forked daemon) is killed with
its worker on timeout, memory cap, crash, executor close and interpreter exit,
and by the worker's watchdog when the worker dies behind the parent's back.

Each fault planner writes the pids it started to ``<pid_dir>/<sample_id>.pids``;
a pid counts as gone when ``/proc/<pid>`` is missing or the process is a zombie.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import fixtures_runner as F
import pytest

from passage_jax.protocol import BudgetSpec
from passage_jax.run.execution import SupervisedExecutor
from passage_jax.run.execution import sessions as X
from passage_jax.run.execution.worker_processes import kill_worker_processes, worker_processes

TESTS = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort3")
    F.write_cohort(root)
    return F.load(root)


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def _wait_gone(pids, timeout_s: float = 5.0) -> list:
    """The pids still running after a bounded wait (empty: all gone)."""
    end = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.02)


def _pids(pid_dir: Path, task) -> list:
    return [int(x) for x in (pid_dir / f"{task.id}.pids").read_text().split()]


def _spawner(tmp_path, task, children, then, memory_mb=None, **kw) -> SupervisedExecutor:
    kwargs = {"ids": [task.id], "pid_dir": str(tmp_path), "children": list(children), "then": then, **kw}
    return SupervisedExecutor("fault_planners:make_spawner", kwargs=kwargs, grace_ms=100, warmup=0,
                              memory_mb=memory_mb)


@pytest.mark.parametrize("children, then, status, note", [
    (["plain"], "hang", "timeout", "killed (SIGKILL), with the 1 process it started"),
    (["session"], "hang", "timeout", "killed (SIGKILL), with the 1 process it started"),
    pytest.param(["daemon"], "hang", "timeout", "killed (SIGKILL), with the 1 process it started",
                 marks=pytest.mark.slow),
    pytest.param(["plain"], "exit", "runtime_error",
                 "(exit code 3); the 1 process it started killed (SIGKILL)", marks=pytest.mark.slow),
    (["session", "daemon"], "exit", "runtime_error",
     "(exit code 3); the 2 processes it started killed (SIGKILL)"),
], ids=["plain-hang", "session-hang", "daemon-hang", "plain-exit", "session-daemon-exit"])
def test_children_die_with_a_killed_or_dead_worker(tasks, tmp_path, children, then, status, note):
    """Timeout and crash: every process the planner started is gone when the record
    is made, even those in their own session whose worker is already dead."""
    t = tasks[1]
    with _spawner(tmp_path, t, children, then) as ex:
        watchdog = ex._worker.watchdog
        rec, _ = ex.execute(t, BudgetSpec(wall_time_ms=400 if then == "hang" else 20_000))
        pids = _pids(tmp_path, t)
        assert rec["status"] == status, rec
        if then == "exit":
            # the dead worker's own watchdog may sweep some or all of its processes before
            # the parent does (a busy machine): the record counts those the parent killed,
            # and every one is gone all the same (below)
            m = re.fullmatch(r"worker process \d+ died during the request \(exit code 3\)"
                             r"(?:; the (\d+) process(?:es)? it started killed \(SIGKILL\))?", rec["error"])
            assert m and int(m.group(1) or 0) <= len(children), rec["error"]
        else:
            assert note in rec["error"], rec["error"]
        assert str(rec["worker"]["pid"]) in rec["error"]
        assert _wait_gone(pids) == [], f"{children}/{then}: still running"
        assert _wait_gone([rec["worker"]["pid"], watchdog]) == []
        rec2, _ = ex.execute(tasks[2], BudgetSpec(wall_time_ms=20_000))  # a fresh worker serves on
        assert rec2["status"] == "ok" and rec2["worker"]["restarted"]


def test_children_of_a_returning_planner_die_at_close(tasks, tmp_path):
    """A planner that returns normally: its processes live with the worker across
    requests and are killed when the executor closes, with the worker's watchdog."""
    t = tasks[0]
    ex = _spawner(tmp_path, t, ["plain", "session", "daemon"], "return")
    with ex:
        rec, _ = ex.execute(t, BudgetSpec(wall_time_ms=20_000))
        assert rec["status"] == "ok" and rec["error"] is None
        pids = _pids(tmp_path, t)
        worker, watchdog = ex._worker.pid, ex._worker.watchdog
        assert watchdog is not None and _alive(watchdog)
        assert all(_alive(p) for p in pids)
        assert set(pids) <= set(worker_processes(worker))  # the daemon re-parented to the worker
        rec, _ = ex.execute(tasks[1], BudgetSpec(wall_time_ms=20_000))
        assert rec["worker"]["pid"] == worker and all(_alive(p) for p in pids)
    assert _wait_gone(pids + [worker, watchdog]) == []


def test_interpreter_exit_sweep(tasks, tmp_path):
    """The exit hook (registered with atexit) kills the worker and its processes."""
    t = tasks[0]
    ex = _spawner(tmp_path, t, ["session", "daemon"], "return")
    try:
        ex.execute(t, BudgetSpec(wall_time_ms=20_000))
        pids = _pids(tmp_path, t) + [ex._worker.pid]
        assert all(_alive(p) for p in pids)
        assert list(X.LIVE_WORKERS) == [ex._worker]  # the hook kills every live worker of the process
        X.kill_live_workers()
        assert _wait_gone(pids) == []
    finally:
        ex.close()


def test_watchdog_sweeps_when_the_worker_dies_unseen(tasks, tmp_path):
    """The worker is SIGKILLed from outside between requests (as when the run dies and
    takes it along): the watchdog kills what it left behind without the parent."""
    t = tasks[0]
    with _spawner(tmp_path, t, ["plain", "session", "daemon"], "return") as ex:
        ex.execute(t, BudgetSpec(wall_time_ms=20_000))
        pids = _pids(tmp_path, t)
        w = ex._worker
        os.kill(w.pid, signal.SIGKILL)
        assert _wait_gone(pids + [w.watchdog], timeout_s=5.0) == []
        rec, _ = ex.execute(tasks[1], BudgetSpec(wall_time_ms=20_000))  # noticed, replaced
        assert rec["status"] == "ok" and rec["worker"]["restarted"]
        assert ex.stats["crashes"] == 1


def test_run_process_sigkilled_leaves_nothing(tasks, tmp_path):
    """The run's own process is SIGKILLed: the worker dies with it (PR_SET_PDEATHSIG)
    and the watchdog kills the planner's processes."""
    t = tasks[0]  # the same first task in the run's own copy of the cohort
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(TESTS)!r})
        import fixtures_runner as F
        from passage_jax.protocol import BudgetSpec
        from passage_jax.run.execution import SupervisedExecutor
        if __name__ == "__main__":
            t = F.load(sys.argv[1])[0]
            ex = SupervisedExecutor("fault_planners:make_spawner", warmup=0,
                                    kwargs={{"ids": [t.id], "pid_dir": sys.argv[2],
                                            "children": ["plain", "session", "daemon"], "then": "return"}})
            ex.execute(t, BudgetSpec(wall_time_ms=20000))
            print(ex._worker.pid, ex._worker.watchdog, flush=True)
            time.sleep(600)
    """)
    root = tmp_path / "cohort"
    F.write_cohort(root)
    (tmp_path / "pids").mkdir()
    run = subprocess.Popen([sys.executable, "-c", script, str(root), str(tmp_path / "pids")],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=TESTS.parents[1])
    try:
        worker, watchdog = (int(x) for x in run.stdout.readline().split())
        pids = _pids(tmp_path / "pids", t)
        assert all(_alive(p) for p in pids + [worker, watchdog])
        run.kill()
        run.wait(30)
        assert _wait_gone(pids + [worker, watchdog], timeout_s=5.0) == []
    finally:
        run.kill()
        run.wait(30)


def test_memory_cap_counts_the_planners_processes(tasks, tmp_path):
    """A planner whose child holds the memory: the cap counts the child's resident set."""
    t = tasks[1]
    with _spawner(tmp_path, t, ["hog"], "hang", child_mb=300, memory_mb=1_000_000) as ex:
        ex.execute(tasks[0], BudgetSpec(wall_time_ms=20_000))
        own = X.rss_mb(ex._worker.pid)
        ex.memory_mb = int(own) + 150  # the worker alone stays under it, worker + child does not
        rec, _ = ex.execute(t, BudgetSpec(wall_time_ms=20_000))
        assert rec["status"] == "oom" and rec["error_type"] == "WorkerMemoryLimit", rec
        assert "(the worker and 1 process it started) passed worker_memory_mb=" in rec["error"]
        assert rec["latency_ms"] < 20_000
        assert _wait_gone(_pids(tmp_path, t)) == []


def test_kill_worker_processes_spares_a_live_worker_on_request(tmp_path):
    """The sweep itself: a stand-in worker (own session, subreaper, token) and its
    children; ``spare_worker`` kills the children only, then the worker goes too."""
    token = "test-token-1"
    src = textwrap.dedent("""
        import ctypes, os, subprocess, sys, time
        os.setsid()
        ctypes.CDLL("libc.so.6").prctl(36, 1)
        os.environ["PASSAGE_JAX_WORKER"] = sys.argv[1]
        py = [sys.executable, "-I", "-S", "-c"]
        a = subprocess.Popen(py + ["import time; time.sleep(600)"], start_new_session=True)
        b = subprocess.Popen(py + ["import os, time; os.fork() or time.sleep(600); time.sleep(600)"])
        print(a.pid, b.pid, flush=True)
        time.sleep(600)
    """)
    w = subprocess.Popen([sys.executable, "-c", src, token], stdout=subprocess.PIPE, text=True)
    try:
        kids = [int(x) for x in w.stdout.readline().split()]
        time.sleep(0.2)
        tree = worker_processes(w.pid)
        assert set(kids) <= set(tree) and len(tree) >= 3  # b forked once more
        hit = kill_worker_processes(w.pid, token, True, spare_worker=True)
        assert w.pid not in hit and set(tree) <= hit
        assert _wait_gone(tree) == [] and w.poll() is None
        assert kill_worker_processes(w.pid, token, True) == {w.pid}
        assert w.wait(5) == -signal.SIGKILL
    finally:
        w.kill()
        w.wait(5)
