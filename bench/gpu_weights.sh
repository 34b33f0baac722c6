#!/usr/bin/env bash
# Split, HERE, the embedded SmolLM2-135M-Instruct GGUF (98 MB) into parts that each fit one device call beside the
# working tree (a call carries at most 64 MiB in all: the tracked tree, the wheels of bench/gpu_wheels.sh with the
# first part, and a margin of 2 MB for what the tree gains before the calls), so that a GPU machine can run
# bench/gpu_learn.sh on real weights. Run it right before the calls: the sizes follow the tree as it is. The parts
# land in bench/gguf/<n>/ (git-ignored), each with the whole file's SHA-256 and the number of parts, and are put back
# together there. The calls follow each other on one warm machine (it goes back after 30 s idle, and with it what
# the earlier calls left in /tmp). With nbs/ left behind (bench/gpu_slim_tree.sh), two, as on 2026-11-27 (an H100:
# 341 s for the first call, 122 s for the second, 40 rounds of learning included):
#
#   bash bench/gpu_wheels.sh && bash bench/gpu_slim_tree.sh on && bash bench/gpu_weights.sh
#   call 1: carry ["bench/wheels", "bench/gguf/1"], timeout_s 480, command: bash bench/gpu_check.sh; bash bench/gpu_learn.sh
#   call 2, sent as soon as call 1 returns, before reading it (30 s idle gives the machine back):
#           carry ["bench/gguf/2"], timeout_s 300, command: SAPO_LEARN_SECONDS=200 bash bench/gpu_learn.sh  (joins, checks, learns)
#   bash bench/gpu_slim_tree.sh off
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
GGUF=$("$PY" -c "from sapo_nb.models import embedded_gguf; print(embedded_gguf())")
limit=$(( 64 * 1024 * 1024 - 2000000 ))
tree=$(git ls-files -z | xargs -0 cat | wc -c)
wheels=$(cat bench/wheels/* 2>/dev/null | wc -c)
total=$(stat -c %s "$GGUF")
first=$(( limit - tree - wheels )); rest=$(( limit - tree ))
[ "$first" -gt 1000000 ] || { echo "gpu_weights: the tree ($tree bytes) and the wheels ($wheels) leave no room" >&2; exit 1; }
rm -rf bench/gguf
n=0; at=0
while [ "$at" -lt "$total" ]; do
  n=$(( n + 1 )); size=$([ "$n" -eq 1 ] && echo "$first" || echo "$rest")
  mkdir -p "bench/gguf/$n"
  dd if="$GGUF" of="bench/gguf/$n/part" iflag=skip_bytes,count_bytes skip="$at" count="$size" status=none
  at=$(( at + size ))
done
digest=$(sha256sum "$GGUF" | cut -d' ' -f1)
for k in $(seq 1 "$n"); do
  echo "$digest  $(basename "$GGUF")" > "bench/gguf/$k/whole.sha256"; echo "$n" > "bench/gguf/$k/parts"
done
joined=$(for k in $(seq 1 "$n"); do cat "bench/gguf/$k/part"; done | sha256sum | cut -d' ' -f1)
[ "$joined" = "$digest" ] || { echo "gpu_weights: the parts do not join back into the GGUF" >&2; exit 1; }
echo "gpu_weights: $n parts, tree $tree bytes, wheels $wheels bytes"; ls -l bench/gguf/*/part
