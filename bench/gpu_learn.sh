#!/usr/bin/env bash
# On a GPU machine: keep the GGUF part this call carried (bench/gguf/<n>/, from bench/gpu_weights.sh) in /tmp; once
# every part is there, join them, check the whole file's SHA-256, and run a short learning check of one node of the
# real SmolLM2-135M-Instruct on `arith` (held-out greedy pass@1 on 512 questions before and after 40 rounds), its
# log and JSON written to $OUT as they come (and to bench/results/ without $OUT). Needs the wheels of
# bench/gpu_wheels.sh, which bench/gpu_check.sh installs in /tmp/sapo-site on the first call of the same machine.
# Exit: 0 when a part was kept or the check learned; 3 when the last part came to a machine that lacks an earlier
# one (it was given back between the calls); else the learning run's status.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PY:-python3}
KEEP=/tmp/sapo-gguf
DEST=${OUT:-bench/results}
mkdir -p "$KEEP" "$DEST"
for d in bench/gguf/*/; do
  [ -f "$d/part" ] && cp "$d/part" "$KEEP/$(basename "$d").part" && cp "$d/whole.sha256" "$d/parts" "$KEEP"/
done
[ -f "$KEEP/parts" ] || { echo "gpu_learn: no part carried yet (bench/gpu_weights.sh, then carry bench/gguf/1)" >&2; exit 2; }
missing=$(for n in $(seq 1 "$(cat "$KEEP/parts")"); do [ -f "$KEEP/$n.part" ] || printf '%s ' "$n"; done)
if [ -n "$missing" ]; then
  if [ -f "$KEEP/$(cat "$KEEP/parts").part" ]; then  # the last part came, an earlier one is gone: a fresh machine
    echo "gpu_learn: part(s) $missing are not here: the machine of the earlier call was given back (30 s idle), and with it" \
         "/tmp; send every call right after the one before" >&2; exit 3
  fi
  echo "gpu_learn: kept $(cd "$KEEP" && ls ./*.part | tr '\n' ' '); still to carry: $missing"; exit 0
fi
export SAPO_CACHE=/tmp/sapo-cache
name=$(cut -d' ' -f3 "$KEEP/whole.sha256")
mkdir -p "$SAPO_CACHE/gguf"
for n in $(seq 1 "$(cat "$KEEP/parts")"); do cat "$KEEP/$n.part"; done > "$SAPO_CACHE/gguf/$name"
(cd "$SAPO_CACHE/gguf" && sha256sum -c "$KEEP/whole.sha256") || { echo "gpu_learn: the joined GGUF is damaged" >&2; exit 2; }
export PYTHONPATH="$PWD:/tmp/sapo-site${PYTHONPATH:+:$PYTHONPATH}"
dev=$($PY -c "import torch, re; print(re.sub(r'[^A-Za-z0-9._-]+', '-', torch.cuda.get_device_name()).strip('-'))") \
  || { echo "gpu_learn: no CUDA device here" >&2; exit 2; }
timeout "${SAPO_LEARN_SECONDS:-240}" $PY bench/learn_single_node.py --device cuda --mix arith --rounds 40 \
  --eval-questions 512 --out "$DEST/gpu_learn_$dev.json" 2>&1 | tee "$DEST/gpu_learn.log"
status=${PIPESTATUS[0]}
echo "gpu_learn: exit $status (1: it ran, but the last rounds' reward was not above the first's)"
exit "$status"
