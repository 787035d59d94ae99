#!/usr/bin/env bash
# The GPU checks on a lent accelerator machine, in parts that each end within 8 minutes
# there (its image: Python 3.12, jax 0.11.2 with the CUDA 13 plugin, numpy 2.5.2, flax,
# optax, pyarrow, scipy, scikit-image, rich, pyyaml, pytest, filelock, matplotlib; not
# zstandard or flatbuffers, carried as wheels in .whl/: see bench/RESULTS.md "GPU").
#
#   bash bench/device_check.sh PART [PART...]      (default: part1)
#   bash bench/device_check.sh --list              the parts, in order
#
# Parts, most valuable first (`partN` names the N-th):
#   part1  references       exact references at 256x256 against SciPy, batch 1/16/256/1024
#                           (float64 sweep), double-float at 256/1024, Jacobi at 16/256
#                           (bench/device/references.py on bench/reference.py's material)
#   part2  bootstrap        bench/stats.py (40,000 tasks, 10,000 draws)
#   part3  score            bench/score_pipeline.py --sizes 500 --no-before --workers 8
#   part4  campaign         bench/campaign_session.py --sizes 500 --workers 8
#   part5  train            the 256x256 baseline's recipe, both stages (configs/train_value256
#                           .yaml, then train_value256ft.yaml from the stage-one checkpoint
#                           just trained) for each seed in TRAIN_SEEDS (default 1234), then
#                           bench/calibrate_learned.py and bench/learned.py on the new
#                           checkpoints (kept in the scratch folder, never in $OUT; the
#                           shipped ones are not touched)
#   part6  metrics          bench/metrics.py
#   part7  bellman_head     bench/bellman_head.py
#   part8  compile_counts   bench/compile_counts.py
#   part9  prefetch         bench/prefetch.py
#   part10 dfloat           tests/reference/test_double_float.py with PASSAGE_JAX_NO_X64=1
#   part11 reference_sizes  bench/reference.py (64..1024, double-float rows)
#   part12 reference_jacobi bench/reference.py --strategy jacobi --compare-jacobi --no-double-float
#   part13 tests            pytest -m "not slow" (pytest-xdist -n 8 when importable)
#   part14 reference_4096   one exact reference at 2048x2048 and 4096x4096 against SciPy
#                           (bench/device/reference_size.py: mirrored terrain, a scale test;
#                           needs no zstandard)
#   part15 batched          the batched procedure's planners (the learned direct one of
#                           configs/learned256_direct_batched.yaml, the exact one) over 40,000
#                           256x256 scenes (the shipped 24 replicated), batches of 64 and 256
#                           (bench/device/batched_40k.py)
# Earlier names: `dfloat` and `tests` are parts; `train256` is `train` with
# TRAIN_SEEDS="1234 2026 3407" (the three seeds: longer than 8 minutes is likely, the
# part stops at its budget); `bench` is every part but train and tests, `all` every part:
# both are many device calls' worth (a call returns 8 files, 2 per part, and runs 10
# minutes at most), so on the device name parts, at most four per call.
#
# Each part writes $OUT/<part>.json (versions, backend and devices, start/end, wall
# seconds, each command's exit status, wall seconds, last lines and, where the benchmark
# writes one, its own JSON) and $OUT/<part>.log (OUT defaults to ./device-out).
# Environment:
#   DEVICE_CHECK_SCALE=full|rehearsal   full (default): the device sizes; rehearsal: small
#       batches, scene counts and training steps, a few minutes a part on a 2-core CPU
#   DEVICE_CHECK_PART_BUDGET_S   a part's wall-time cap (default 480): a command still
#       running then is ended and the rest are recorded as skipped
#   DEVICE_CHECK_CALL_BUDGET_S   the whole call's cap (default 560, inside the device's 10
#       minutes a command): each part gets at most what is left; with under 60 s left a
#       part is not started (its JSON says so)
#   DEVICE_CHECK_WORK   scratch folder (cohorts, checkpoints; default /tmp/device-check-<scale>)
#   XLA_PYTHON_CLIENT_PREALLOCATE   set to false unless given (several processes share the GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-device-out}"
mkdir -p "$out"
export OUT="$out" PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"
if [ "${1:-}" = --list ]; then exec python3 bench/device/run_parts.py --list; fi
parts=()
for what in "${@:-part1}"; do
  case "$what" in
    bench) parts+=(references bootstrap score campaign metrics bellman_head compile_counts prefetch
                   dfloat reference_sizes reference_jacobi reference_4096 batched) ;;
    all) parts+=(references bootstrap score campaign train metrics bellman_head compile_counts
                 prefetch dfloat reference_sizes reference_jacobi tests reference_4096 batched) ;;
    train256) export TRAIN_SEEDS="${TRAIN_SEEDS:-1234 2026 3407}"; parts+=(train) ;;
    *) parts+=("$what") ;;
  esac
done
python3 bench/device/run_parts.py --check "${parts[@]}" || exit 2
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$out/pip.txt" 2>&1 \
    || { echo "device_check: installing the carried wheels failed: $(tail -n 1 "$out/pip.txt")"; exit 3; }
  rm -f "$out/pip.txt"
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
# every import the parts need, checked before any part runs: one line when one is missing
# (zstandard only where a part reads or writes shards: reference_4096 alone needs none)
zstd=zstandard
python3 bench/device/run_parts.py --needs-zstandard "${parts[@]}" || zstd=
DEVICE_CHECK_ZSTD="$zstd" python3 - "${parts[@]}" <<'PY' || exit 3
import importlib, os, sys
need = ["jax", "jaxlib", "numpy", "scipy", "flax", "optax", "pyarrow", "yaml",
        "rich", "filelock", "matplotlib", "packaging", "passage_jax", "cli"]
need += [m for m in [os.environ.get("DEVICE_CHECK_ZSTD", "zstandard")] if m]
if any(p in ("dfloat", "tests", "part10", "part13") for p in sys.argv[1:]):
    need.append("pytest")
bad = []
for m in need:
    try:
        importlib.import_module(m)
    except Exception as e:  # noqa: BLE001
        bad.append(f"{m} ({type(e).__name__})")
if bad:
    print(f"device_check: missing import(s): {', '.join(bad)} (python {sys.version.split()[0]}; "
          "carry wheels in .whl/, see bench/RESULTS.md 'GPU')")
    sys.exit(1)
PY
exec python3 bench/device/run_parts.py --out "$out" "${parts[@]}"
