"""The parts of the device check (``bash bench/device_check.sh PART...``): each part runs its
commands one after the other, its output to ``$OUT/<part>.log`` (and to stdout), and
writes ``$OUT/<part>.json``: the part's name and scale, the python/jax/jaxlib/numpy (and
other packages') versions, backend and devices, start/end times, wall seconds, and per
command its argv, exit status, wall seconds, the last lines it printed and, where the
benchmark writes one (``--json-out``/``--out``), its own JSON document. Nothing is parsed
from the logs. The JSON is rewritten after every command, so a part stopped part way
keeps what it did.

A part never runs longer than its budget (``DEVICE_CHECK_PART_BUDGET_S``, default 480 s:
the 8 minutes a part is sized to on the device): a command still running then is ended
(its process group), the rest are recorded as skipped. Several parts in one call share
``DEVICE_CHECK_CALL_BUDGET_S`` (default 560 s, inside the device's 10 minutes a command):
a part gets at most what is left of it, and one with under a minute left is not started
(its JSON says so).

``DEVICE_CHECK_SCALE``: ``full`` (default, the device sizes) or ``rehearsal`` (small
batches, scene counts and training steps: a few minutes per part on a 2-core CPU, to
check that every command runs under the image's versions before a device is spent).

Run through ``bench/device_check.sh`` (it installs the carried wheels and checks the
imports first); ``python3 bench/device/run_parts.py --list`` prints the parts.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

#: the parts, most valuable first (part1, part2, ... are these in order)
ORDER = ("references", "bootstrap", "score", "campaign", "train", "metrics", "bellman_head",
         "compile_counts", "prefetch", "dfloat", "reference_sizes", "reference_jacobi", "tests",
         "reference_4096", "batched")
#: parts that read or write no shard, so need no zstandard (bench/device_check.sh checks the
#: imports of the parts it is asked for)
NO_ZSTANDARD = ("reference_4096",)

WHAT = {
    "references": "exact references at 256x256 against SciPy: batches 1/16/256/1024 (float64 sweep), "
                  "double-float at 256/1024, Jacobi at 16/256 (bench/device/references.py)",
    "bootstrap": "the seed-mean block bootstrap, 40,000 tasks x 10,000 draws (bench/stats.py)",
    "score": "`cli score` end to end on a 500-scene 256x256 cohort (bench/score_pipeline.py)",
    "campaign": "the paper's campaign session at 500 scenes, 3 seeds, exact vs greedy "
                "(bench/campaign_session.py)",
    "train": "the 256x256 learned baseline's two training stages for the seeds in TRAIN_SEEDS "
             "(default 1234), then the calibration sweep and the learned-search table on them",
    "metrics": "decoded-path metrics, 10,000 routes (bench/metrics.py)",
    "bellman_head": "the value-iteration head against NumPy (bench/bellman_head.py)",
    "compile_counts": "kernel compilations of chunked scoring and VI (bench/compile_counts.py)",
    "prefetch": "the task stream's read-ahead (bench/prefetch.py)",
    "dfloat": "the double-float tests with x64 off (tests/reference/test_double_float.py)",
    "reference_sizes": "bench/reference.py's whole table, 64..1024, with the double-float rows",
    "reference_jacobi": "bench/reference.py --strategy jacobi --compare-jacobi, 64..1024",
    "tests": "the default test selection (-m 'not slow'), pytest-xdist when importable",
    "reference_4096": "one exact reference at 2048x2048 and 4096x4096 (mirrored terrain, a scale test) "
                      "against SciPy (bench/device/reference_size.py)",
    "batched": "the batched procedure's planners (learned256_direct_batched's, the exact one) over "
               "40,000 256x256 scenes, batches of 64 and 256 (bench/device/batched_40k.py)",
}

#: packages whose installed versions each part's JSON records (importlib.metadata: nothing
#: is imported for it)
PACKAGES = ("jax", "jaxlib", "numpy", "scipy", "flax", "optax", "pyarrow", "zstandard",
            "scikit-image", "rich", "pyyaml", "pytest", "pytest-xdist", "filelock", "matplotlib",
            "packaging", "psutil", "ml_dtypes", "orbax-checkpoint", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt")

#: the training configs' keys shrunk at the rehearsal scale
REHEARSAL_TRAIN = {"stage1": {"n_train": 16, "n_eval": 4, "steps": 20, "warmup_steps": 5,
                              "eval_every": 10},
                   "stage2": {"n_train": 8, "n_eval": 4, "steps": 10, "warmup_steps": 2,
                              "eval_every": 5}}


class Cmd:
    def __init__(self, name, argv, env=None, json_file=None):
        self.name, self.argv, self.env, self.json_file = name, [str(a) for a in argv], env or {}, json_file


def _py(*args):
    return [PY, *args]


def _train_configs(tdir: Path, rehearsal: bool) -> tuple[Path, Path]:
    """Copies of the two stage configs under ``tdir`` (stage two initialised from stage
    one's checkpoints in ``tdir``), shrunk at the rehearsal scale."""
    import yaml
    tdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stage, name in (("stage1", "train_value256.yaml"), ("stage2", "train_value256ft.yaml")):
        cfg = yaml.safe_load((REPO / "configs" / name).read_text())
        if stage == "stage2":
            cfg["init"] = str(tdir / "value256-{seed}")
        if rehearsal:
            cfg.update(REHEARSAL_TRAIN[stage])
        p = tdir / name
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        paths.append(p)
    return paths[0], paths[1]


def plan(part: str, rehearsal: bool, work: Path) -> list[Cmd]:
    """The commands of ``part`` at the chosen scale (``work``: scratch outside $OUT)."""
    r = rehearsal
    jdir = work / "json"
    if part == "references":
        j = jdir / "references.json"
        size = (["--batches", "1", "16", "256", "--double-float", "16", "256", "--jacobi", "16",
                 "--peer", "8", "--repeats", "2"] if r else [])
        return [Cmd("references_256", _py("bench/device/references.py", *size, "--json-out", j),
                    json_file=j)]
    if part == "bootstrap":
        return [Cmd("stats", _py("bench/stats.py", *(["--quick"] if r else [])))]
    if part == "score":
        j = jdir / "score_pipeline.json"
        size = ["--sizes", "64", "--workers", "2"] if r else ["--sizes", "500", "--workers", "8"]
        return [Cmd("score_pipeline", _py("bench/score_pipeline.py", *size, "--no-before", "--work",
                                          work / "campaign", "--json-out", j), json_file=j)]
    if part == "campaign":
        j = jdir / "campaign_session.json"
        size = ["--sizes", "64", "--workers", "2"] if r else ["--sizes", "500", "--workers", "8"]
        return [Cmd("campaign_session", _py("bench/campaign_session.py", *size, "--work", work / "campaign",
                                            "--json-out", j), json_file=j)]
    if part == "train":
        seeds = os.environ.get("TRAIN_SEEDS", "1234").split()
        tdir = work / "train"
        shutil.rmtree(tdir, ignore_errors=True)
        c1, c2 = _train_configs(tdir, r)
        cmds = []
        for s in seeds:
            cmds.append(Cmd(f"train256-{s}", _py("-m", "cli", "train", "--no-progress", "--config", c1,
                                                 "--out", tdir / f"value256-{s}", "--seed", s)))
            cmds.append(Cmd(f"train256ft-{s}", _py("-m", "cli", "train", "--no-progress", "--config", c2,
                                                   "--out", tdir / f"value256ft-{s}", "--seed", s)))
        j = tdir / "calibration.json"
        small = (["--n", "2", "--radii", "none", "2", "--ratios", "none", "--escapes", "0",
                  "--backups", "0", "16", "--direct-escapes", "0", "4"] if r else [])
        cmds.append(Cmd("calibrate256", _py("bench/calibrate_learned.py", "--families",
                                            tdir / "value256-{seed}", tdir / "value256ft-{seed}",
                                            "--seeds", *seeds, *small, "--out", j), json_file=j))
        for fam in ("value256", "value256ft"):
            cmds.append(Cmd(f"learned256-{fam}", _py(
                "bench/learned.py", "--specs", "learned256", "--resolution", "256", "--checkpoint",
                tdir / f"{fam}-{{seed}}", "--seeds", *seeds,
                *(["--n", "2", "--timing-requests", "2"] if r else []))))
        return cmds
    if part == "metrics":
        return [Cmd("metrics", _py("bench/metrics.py", *(["--quick"] if r else [])))]
    if part == "bellman_head":
        return [Cmd("bellman_head", _py("bench/bellman_head.py",
                                        *(["--k", "16", "--n", "2", "--repeats", "1"] if r else [])))]
    if part == "compile_counts":
        return [Cmd("compile_counts", _py("bench/compile_counts.py", *(["--quick"] if r else [])))]
    if part == "prefetch":
        return [Cmd("prefetch", _py("bench/prefetch.py", *(["--quick"] if r else [])))]
    if part == "dfloat":
        return [Cmd("double_float_tests",
                    _py("-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider", "-o", "addopts=",
                        "tests/reference/test_double_float.py"), env={"PASSAGE_JAX_NO_X64": "1"})]
    if part == "reference_sizes":
        return [Cmd("reference", _py("bench/reference.py", *(["--quick"] if r else [])))]
    if part == "reference_jacobi":
        return [Cmd("reference_jacobi", _py("bench/reference.py", "--strategy", "jacobi", "--compare-jacobi",
                                            "--no-double-float", *(["--quick"] if r else [])))]
    if part == "reference_4096":
        j = jdir / "reference_size.json"
        size = ["--res", "256", "512", "--repeats", "1"] if r else ["--res", "2048", "4096", "--repeats", "2"]
        return [Cmd("reference_size", _py("bench/device/reference_size.py", *size, "--json-out", j),
                    json_file=j)]
    if part == "batched":
        j = jdir / "batched_40k.json"
        size = ["--scenes", "96", "--batch-sizes", "8", "32"] if r else \
            ["--scenes", "40000", "--batch-sizes", "64", "256"]
        return [Cmd("batched_40k", _py("bench/device/batched_40k.py", *size, "--json-out", j),
                    json_file=j)]
    if part == "tests":
        base = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--maxfail=20",
                "--durations=10"]
        if r:  # never the whole suite on the shared 2-core CPU: collect everything, run one file
            return [Cmd("tests_collect", _py("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                                             "-m", "not slow", "--collect-only")),
                    Cmd("tests_sample", _py(*base, "-m", "not slow", "tests/graph/test_graph.py",
                                            "tests/test_no_x64.py"))]
        try:
            import xdist  # noqa: F401
            base += ["-n", "8", "--dist", "loadscope"]
        except ImportError:
            pass
        return [Cmd("tests", _py(*base, "-m", "not slow"))]
    raise KeyError(part)


def versions() -> dict:
    """Package versions (metadata) and, from a short child process, JAX's backend and
    devices (the child, not this process, initialises the accelerator)."""
    import platform
    from importlib import metadata
    out = {"python": platform.python_version(), "platform": platform.platform(),
           "cpus": os.cpu_count(), "packages": {}}
    for p in PACKAGES:
        try:
            out["packages"][p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    for k in ("jax", "jaxlib", "numpy"):
        out[k] = out["packages"].get(k)
    code = ("import json, jax, jaxlib, numpy; d = jax.devices(); print(json.dumps({'jax': jax.__version__, "
            "'jaxlib': jaxlib.__version__, 'numpy': numpy.__version__, 'backend': jax.default_backend(), "
            "'devices': [f'{x.platform}:{x.id} {x.device_kind}' for x in d]}))")
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=180)
        out.update(json.loads(p.stdout.strip().splitlines()[-1]))
    except Exception as e:  # noqa: BLE001
        out["devices_error"] = f"{type(e).__name__}: {e}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out["nvidia_smi"] = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception:  # noqa: BLE001
            pass
    return out


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def run_command(cmd: Cmd, log, timeout: float) -> dict:
    """Run ``cmd`` (its own process group), its output to ``log`` and stdout."""
    log.write(f"\n$ {shlex.join(cmd.argv)}\n")
    log.flush()
    env = {**os.environ, **cmd.env}
    tail: deque[str] = deque(maxlen=25)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd.argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace", start_new_session=True)
    timed_out = False

    def _stop(signum, frame):  # a stopped device call: end the child's group too
        os.killpg(p.pid, signal.SIGKILL)
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _stop)

    def _pump():
        for line in p.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            log.write(line)
            log.flush()
            tail.append(line.rstrip("\n"))

    reader = threading.Thread(target=_pump, daemon=True)
    reader.start()
    try:
        p.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        signal.signal(signal.SIGTERM, old)
    reader.join(timeout=30)
    rc = p.wait()
    wall = time.perf_counter() - t0
    if timed_out:
        msg = f"[device_check] {cmd.name}: stopped at the part's budget after {wall:.0f} s"
        print(msg)
        log.write(msg + "\n")
        tail.append(msg)
    rec = {"name": cmd.name, "argv": cmd.argv, "env": cmd.env, "rc": rc, "timed_out": timed_out,
           "wall_s": round(wall, 2), "tail": list(tail)}
    if cmd.json_file is not None and Path(cmd.json_file).is_file():
        try:
            rec["json"] = json.loads(Path(cmd.json_file).read_text())
        except ValueError as e:
            rec["json_error"] = str(e)
    return rec


def run_part(part: str, out: Path, scale: str, work: Path, budget: float) -> int:
    t0 = time.perf_counter()
    doc = {"part": part, "index": ORDER.index(part) + 1, "what": WHAT[part], "scale": scale,
           "budget_s": budget, "start": _now(), "end": None, "wall_s": None, "status": "running",
           "versions": versions(), "commands": []}
    jpath, lpath = out / f"{part}.json", out / f"{part}.log"
    (work / "json").mkdir(parents=True, exist_ok=True)
    for f in (work / "json").glob("*.json"):
        f.unlink()
    v = doc["versions"]
    head = (f"[device_check] part {doc['index']} {part} ({scale}): python {v['python']}, jax {v.get('jax')}, "
            f"jaxlib {v.get('jaxlib')}, numpy {v.get('numpy')}, backend {v.get('backend')}, "
            f"devices {v.get('devices')}")
    print(head, flush=True)
    with open(lpath, "w") as log:
        log.write(head + "\n")
        try:
            cmds = plan(part, scale == "rehearsal", work)
        except Exception as e:  # noqa: BLE001
            doc["commands"].append({"name": "plan", "rc": 1, "error": f"{type(e).__name__}: {e}"})
            cmds = []
        _write(jpath, doc)
        for cmd in cmds:
            left = budget - (time.perf_counter() - t0)
            if left < 5:
                doc["commands"].append({"name": cmd.name, "argv": cmd.argv, "rc": None, "skipped": True,
                                        "why": "the part's budget was spent"})
                continue
            doc["commands"].append(run_command(cmd, log, left))
            _write(jpath, doc)
        doc["wall_s"] = round(time.perf_counter() - t0, 2)
        doc["end"] = _now()
        bad = [c["name"] for c in doc["commands"] if c.get("rc") != 0]
        doc["status"] = "ok" if cmds and not bad else "failed: " + ", ".join(bad or ["no command"])
        _write(jpath, doc)
        line = f"[device_check] part {part}: {doc['status']}, {doc['wall_s']:.1f} s ({scale})"
        print(line, flush=True)
        log.write(line + "\n")
    return 0 if doc["status"] == "ok" else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help="part names or part1..partN")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "device-out"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true", help="only check the part names")
    ap.add_argument("--needs-zstandard", action="store_true",
                    help="exit 0 when one of the parts reads or writes shards (needs zstandard), else 1")
    a = ap.parse_args(argv)
    if a.list or not a.parts:
        for i, p in enumerate(ORDER, 1):
            print(f"part{i:<3}{p:<18}{WHAT[p]}")
        return 0
    parts = []
    for p in a.parts:
        if p.startswith("part") and p[4:].isdigit() and 1 <= int(p[4:]) <= len(ORDER):
            p = ORDER[int(p[4:]) - 1]
        if p not in ORDER:
            print(f"device_check: unknown part {p!r} (parts: {', '.join(ORDER)}; part1..part{len(ORDER)})")
            return 2
        parts.append(p)
    if a.check:
        return 0
    if a.needs_zstandard:
        return 0 if any(p not in NO_ZSTANDARD for p in parts) else 1
    scale = os.environ.get("DEVICE_CHECK_SCALE", "full")
    if scale not in ("full", "rehearsal"):
        print(f"device_check: DEVICE_CHECK_SCALE must be full or rehearsal, got {scale!r}")
        return 2
    budget = float(os.environ.get("DEVICE_CHECK_PART_BUDGET_S", "480"))
    work = Path(os.environ.get("DEVICE_CHECK_WORK", f"/tmp/device-check-{scale}"))
    total = float(os.environ.get("DEVICE_CHECK_CALL_BUDGET_S", "560"))
    a.out.mkdir(parents=True, exist_ok=True)
    t0, rc = time.perf_counter(), 0
    for p in parts:
        left = total - (time.perf_counter() - t0)
        if left < 60:  # not started: a one-line record says why
            doc = {"part": p, "index": ORDER.index(p) + 1, "scale": scale, "status": "skipped",
                   "why": f"the call's budget ({total:.0f} s, DEVICE_CHECK_CALL_BUDGET_S) was spent"}
            _write(a.out / f"{p}.json", doc)
            print(f"[device_check] part {p}: skipped ({doc['why']})", flush=True)
            rc |= 1
            continue
        rc |= run_part(p, a.out, scale, work, min(budget, left))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
