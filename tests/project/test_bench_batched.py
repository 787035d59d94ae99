"""bench/batched.py's learned part end to end with ``--split-devices``: in a fresh process
whose CPU backend has two devices, each batch split over them plans the batch-one routes
(the benchmark's own check, exit status 0) and its row names the split."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

__all__: list[str] = []

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.needs_float64("the batched routes equal the batch-one float64 descent's")


@pytest.mark.slow
def test_the_learned_part_split_over_two_devices_plans_the_batch_one_routes(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "batched.py"), "--part", "learned",
                           "--quick", "--split-devices"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if "split over 2 devices" in line]
    # --quick: batch sizes 1 and 8; two devices divide 8 only
    assert len(rows) == 1 and rows[0].split()[0] == "8" and "identical" in rows[0]
    assert "routes identical to batch-one: yes" in done.stdout
