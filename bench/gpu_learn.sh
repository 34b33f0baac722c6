#!/usr/bin/env bash
# On a GPU machine: keep the GGUF part this call carried (bench/gguf/<n>/, from bench/gpu_weights.sh) in /tmp; once
# all three are there, join them, check the whole file's SHA-256, and run a short learning check of one node of the
# real SmolLM2-135M-Instruct on `arith` (held-out greedy pass@1 on 512 questions before and after), written to
# bench/results/gpu_learn_<device>.json (and copied to $OUT). Needs the wheels of bench/gpu_wheels.sh installed by an
# earlier call on the same warm machine (bench/gpu_check.sh installs them in /tmp/sapo-site).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PY:-python3}
KEEP=/tmp/sapo-gguf
mkdir -p "$KEEP"
for d in bench/gguf/*/; do
  [ -f "$d/part" ] && cp "$d/part" "$KEEP/$(basename "$d").part" && cp "$d/whole.sha256" "$KEEP/whole.sha256"
done
missing=$(for n in 1 2 3; do [ -f "$KEEP/$n.part" ] || printf '%s ' "$n"; done)
if [ -n "$missing" ]; then echo "gpu_learn: kept $(ls "$KEEP"); parts still to carry: $missing"; exit 0; fi
export SAPO_CACHE=/tmp/sapo-cache
name=$(cut -d' ' -f3 "$KEEP/whole.sha256")
mkdir -p "$SAPO_CACHE/gguf"
cat "$KEEP/1.part" "$KEEP/2.part" "$KEEP/3.part" > "$SAPO_CACHE/gguf/$name"
(cd "$SAPO_CACHE/gguf" && sha256sum -c "$KEEP/whole.sha256") || { echo "gpu_learn: the joined GGUF is damaged" >&2; exit 2; }
export PYTHONPATH="$PWD:/tmp/sapo-site${PYTHONPATH:+:$PYTHONPATH}"
dev=$($PY -c "import torch, re; print(re.sub(r'[^A-Za-z0-9._-]+', '-', torch.cuda.get_device_name()).strip('-'))")
out=bench/results/gpu_learn_$dev.json
timeout 420 $PY bench/learn_single_node.py --device cuda --mix arith --rounds 60 --eval-questions 512 --out "$out" 2>&1 \
  | tee bench/results/gpu_learn.log
echo "gpu_learn: exit ${PIPESTATUS[0]}"
[ -n "${OUT:-}" ] && cp "$out" bench/results/gpu_learn.log "$OUT"/ 2>/dev/null
exit 0
