#!/usr/bin/env bash
# Split, HERE, the embedded SmolLM2-135M-Instruct GGUF (98 MB) into three parts that each fit one device call beside
# the working tree (a call carries at most 64 MiB in all: the tracked tree is about 24 MB, the wheels 15 MB), so that
# a GPU machine can run bench/gpu_learn.sh on real weights. The parts land in bench/gguf/<n>/ (git-ignored), each
# with the whole file's SHA-256, and are put back together there. Three calls in a row on one warm machine (it goes
# back after 30 s idle, and with it what the first calls left in /tmp):
#
#   bash bench/gpu_wheels.sh && bash bench/gpu_weights.sh
#   call 1: carry ["bench/wheels", "bench/gguf/1"], command: bash bench/gpu_learn.sh; bash bench/gpu_check.sh
#   call 2: carry ["bench/gguf/2"],                 command: bash bench/gpu_learn.sh
#   call 3: carry ["bench/gguf/3"],                 command: bash bench/gpu_learn.sh     (joins, checks, learns)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
GGUF=$("$PY" -c "from sapo_nb.models import embedded_gguf; print(embedded_gguf())")
rm -rf bench/gguf && mkdir -p bench/gguf/1 bench/gguf/2 bench/gguf/3
digest=$(sha256sum "$GGUF" | cut -d' ' -f1)
cut_part() { dd if="$GGUF" of="bench/gguf/$1/part" iflag=skip_bytes,count_bytes skip="$2" ${3:+count=$3} status=none; }
cut_part 1 0 25000000
cut_part 2 25000000 37000000
cut_part 3 62000000
for n in 1 2 3; do echo "$digest  $(basename "$GGUF")" > bench/gguf/$n/whole.sha256; done
[ "$(cat bench/gguf/1/part bench/gguf/2/part bench/gguf/3/part | sha256sum | cut -d' ' -f1)" = "$digest" ]
ls -l bench/gguf/*/part; du -sh bench/gguf
