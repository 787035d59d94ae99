"""bench/resolutions.py: its scaling fit against a hand power law, the shard and builder
sizes, and what it reads from run folders (timed requests only, scored records)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

__all__: list[str] = []

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_resolutions", REPO / "bench" / "resolutions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


res = _bench()


def test_fit_power_by_hand():
    cells = [64 ** 2, 256 ** 2, 1024 ** 2]
    c, b = res.fit_power(cells, [3e-6 * x ** 1.25 for x in cells])
    assert b == pytest.approx(1.25, rel=1e-9) and c == pytest.approx(3e-6, rel=1e-9)
    # two points: the line through them; missing and non-positive values are left out
    assert res.fit_power([100, 400, 900], [2.0, None, 0.0]) is None
    c, b = res.fit_power([100, 400], [1.0, 8.0])
    assert b == pytest.approx(math.log(8) / math.log(4)) and c * 100 ** b == pytest.approx(1.0)


def test_sizes_of_shards_and_builders():
    assert [res.rows_per_shard(n) for n in res.SIZES] == [64, 64, 64, 64, 64, 16, 4]
    assert [res.default_scenes(n) for n in res.SIZES] == [4, 4, 4, 4, 4, 4, 2]
    assert [res.builder_workers(n, 2) for n in (1024, 2048, 4096)] == [2, 1, 1]


def test_run_folder_readers(tmp_path):
    seed = tmp_path / "seed-7"
    seed.mkdir()
    recs = [{"series": "cold", "latency_ms": 900.0}, {"series": "cold", "latency_ms": 5.0},
            {"series": "warm", "latency_ms": 4.0}, {"series": "warm", "latency_ms": 6.0},
            {"series": "warm", "latency_ms": None}]
    (seed / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert res.request_latencies(tmp_path) == [4.0, 6.0]
    np.savez(seed / "per_sample.npz", sample_id=np.array(["a", "b", "c"]), regret=np.zeros(3))
    assert res.scored_records(tmp_path) == 3
    assert res.scored_records(tmp_path / "nothing") == 0
