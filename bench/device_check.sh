#!/usr/bin/env bash
# One prepared run of the GPU checks on a lent accelerator machine (its image has
# jax with CUDA, flax, optax, pyarrow, scipy, scikit-image, rich, pyyaml, pytest;
# zstandard is carried as a wheel in .whl/, see bench/RESULTS.md "GPU").
#
#   bash bench/device_check.sh [bench|tests|dfloat|train256|all]     (default: bench)
#
# bench: the benchmarks (bench/reference.py includes the double-float rows beside
# float64) and the double-float checks; dfloat: only the double-float checks (the
# pair arithmetic survives the GPU compiler, the cohort agrees, no float64 in use);
# train256: the 256x256 learned baseline's recipe on the accelerator, both stages
# (configs/train_value256.yaml, then configs/train_value256ft.yaml started from the
# stage-one checkpoint just trained) for each seed, with their wall times, then the
# calibration sweep and the learned-search table on the new checkpoints (written to
# $OUT; the shipped ones are not touched).
#
# Logs go to $OUT (or ./device-out) so they come back with the run.
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-bench}"
out="${OUT:-device-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site" || exit 1
fi
python3 - <<'PY' 2>&1 | tee "$out/devices.log"
import jax, platform
print("python", platform.python_version(), "jax", jax.__version__, jax.devices())
PY
if [ "$what" = tests ] || [ "$what" = all ]; then
  # without pytest-xdist on the image: the default selection, in one process
  python3 -m pytest -q -x -p no:cacheprovider -o addopts="" -m "not slow" 2>&1 | tee "$out/tests.log"
fi
if [ "$what" = bench ] || [ "$what" = dfloat ] || [ "$what" = all ]; then
  PASSAGE_JAX_NO_X64=1 python3 -m pytest -q -x -s -p no:cacheprovider -o addopts="" tests/test_double_float.py \
    2>&1 | tee "$out/double_float_tests.log"
fi
if [ "$what" = train256 ]; then
  sed "s#^init: .*#init: \"$out/value256-{seed}\"#" configs/train_value256ft.yaml > "$out/train_value256ft.yaml"
  for seed in 1234 2026 3407; do
    python3 -m cli train --no-progress --config configs/train_value256.yaml \
      --out "$out/value256-$seed" --seed "$seed" 2>&1 | tee "$out/train256-$seed.log"
    python3 -m cli train --no-progress --config "$out/train_value256ft.yaml" \
      --out "$out/value256ft-$seed" --seed "$seed" 2>&1 | tee "$out/train256ft-$seed.log"
  done
  python3 bench/calibrate_learned.py --families "$out/value256-{seed}" "$out/value256ft-{seed}" --out "$out/calibration.json" \
    2>&1 | tee "$out/calibrate256.log"
  for family in value256 value256ft; do
    python3 bench/learned.py --specs learned256 --resolution 256 --checkpoint "$out/$family-{seed}" \
      2>&1 | tee "$out/learned256-$family.log"
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 bench/reference.py 2>&1 | tee "$out/reference.log"
  python3 bench/reference.py --strategy jacobi --compare-jacobi --no-double-float 2>&1 \
    | tee "$out/reference_jacobi.log"
  python3 bench/stats.py 2>&1 | tee "$out/stats.log"
  python3 bench/metrics.py 2>&1 | tee "$out/metrics.log"
  python3 bench/bellman_head.py 2>&1 | tee "$out/bellman_head.log"
  python3 bench/compile_counts.py 2>&1 | tee "$out/compile_counts.log"
  python3 bench/prefetch.py 2>&1 | tee "$out/prefetch.log"
  # score end to end on the accelerator (this code only: the device copy has no git history)
  python3 bench/score_pipeline.py --sizes 500 --no-before --workers 8 --work /tmp/passage_campaign 2>&1 \
    | tee "$out/score_pipeline.log"
  # the paper's campaign session (native_raw_path_persistent_v1, three seeds, exact vs greedy)
  python3 bench/campaign_session.py --sizes 500 --workers 8 --work /tmp/passage_campaign \
    --json-out "$out/campaign_session.json" 2>&1 | tee "$out/campaign_session.log"
fi
