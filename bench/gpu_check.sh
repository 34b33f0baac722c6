#!/usr/bin/env bash
# The GPU check of sapo_nb, in one call of at most 8 minutes, from the repository root of a carried tree:
#   1. installs what the machine lacks from bench/wheels/ (fetched beforehand by bench/gpu_wheels.sh; nothing is
#      downloaded here) and makes this tree importable,
#   2. runs tests/test_cuda.py (the CUDA path does what the CPU path does),
#   3. runs bench/gpu_round.py: rounds of the `paper` settings on random SmolLM2-135M- and Qwen2.5-0.5B-shaped
#      models, 1 and 8 nodes, full and LoRA, decoding eager and compiled, with tokens/s against a roofline and peak
#      memory beside the estimate,
#      written to $OUT/gpu_<device name>.json as each stage ends (bench/results/ without $OUT), beside the logs, so a
#      call cut off by its time limit still brings back what had finished.
# Each step is bounded in time (SAPO_GPU_SECONDS, 400 by default, for the tests and the rounds together); a failing
# step does not stop the next.
# The learning check on real SmolLM2 weights follows it on the same warm machine: see bench/gpu_weights.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PY:-python3}
RES=${OUT:-bench/results}  # on a device machine, only what is under $OUT comes back
SITE=/tmp/sapo-site
t0=$(date +%s)
if ls bench/wheels/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" bench/wheels/*.whl \
    || echo "gpu_check: installing the carried wheels failed" >&2
fi
for sdist in bench/wheels/*.tar.gz; do  # packages with no wheel for this Python (pycosat): built here, offline
  [ -e "$sdist" ] && { $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" "$sdist" \
    || echo "gpu_check: building $sdist failed" >&2; }
done
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"   # this tree's sapo_nb, without a build step
$PY -c "import sapo_nb.swarm, torch; print('sapo_nb', sapo_nb.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  || { echo "gpu_check: sapo_nb does not import; run bench/gpu_wheels.sh here and carry bench/wheels" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
mkdir -p "$RES"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$RES/gpu_pytest.log"
echo "gpu_check: tests exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
left=$(( ${SAPO_GPU_SECONDS:-400} - ($(date +%s) - t0) ))
timeout $(( left > 60 ? left : 60 )) $PY bench/gpu_round.py --budget $(( left > 90 ? left - 30 : 60 )) "$@" 2>&1 | tee "$RES/gpu_round.log"
echo "gpu_check: rounds exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
