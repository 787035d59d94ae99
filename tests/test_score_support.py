"""Shared, cached end-to-end runs on a copy of the shipped 64x64 test cohort.

Built once per test process (the first test that asks) and reused by the
score, compare, report and bench tests. Holds no tests itself.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

N_SAMPLES = 6
_CACHE: dict = {}


def spec_dict(method: str, root: Path, seeds=(1234,), n_samples=N_SAMPLES, **extra) -> dict:
    d = {
        "method_name": method,
        "inference": f"passage_jax.planners.{method}:make_planner",
        "resolution": 64, "cost_model": "energy", "split": "test",
        "task_variant": "obstacles", "n_samples": n_samples, "seeds": list(seeds),
        "dataset_path": str(root), "latency_warmup": 1, "latency_repeats": 1,
        "quality_repeat_index": 0, "results_root": str(root.parent / "results"),
    }
    d.update(extra)
    return d


def copy_cohort(dest: Path) -> Path:
    from passage_jax.data import shipped_cohort_root

    src = shipped_cohort_root() / "64x64" / "test"
    (dest / "64x64" / "test").mkdir(parents=True)
    for f in sorted(src.glob("*.parquet")):
        shutil.copy2(f, dest / "64x64" / "test" / f.name)
    return dest


def runs() -> dict:
    """{"root": tmp folder, "cohort": dataset root, "<name>": scored run folder}."""
    if _CACHE:
        return _CACHE
    from passage_jax.evaluate.score import score_run
    from passage_jax.run import parse_spec, run_spec

    tmp = Path(tempfile.mkdtemp(prefix="passage-score-tests-"))
    atexit.register(shutil.rmtree, tmp, True)
    cohort = copy_cohort(tmp / "cohort")
    out = {"root": tmp, "cohort": cohort}
    for name, method, seeds in (("exact", "exact", (1234, 2026)), ("bfs", "bfs", (1234, 2026)),
                                ("greedy", "greedy", (1234,))):
        folder = tmp / name
        run_spec(parse_spec(spec_dict(method, cohort, seeds)), folder, progress=False)
        score_run(folder)
        out[name] = folder
    _CACHE.update(out)
    return _CACHE
