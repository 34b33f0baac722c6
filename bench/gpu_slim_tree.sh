#!/usr/bin/env bash
# A device call carries the whole working tree (at most 64 MiB with what `carry` names), and nbs/ (the notebooks and
# the committed run data, ~35 MB and growing) is most of it, while a GPU check needs only sapo_nb/, tests/ and bench/.
# `on` takes nbs/ out of the index and ignores it in .git/info/exclude, so it stays on disk but does not travel (the
# GGUF of bench/gpu_weights.sh then goes in two parts instead of four); `off` puts the index back as HEAD has it.
# Run `on` right before bench/gpu_weights.sh and the calls, `off` right after them, and commit nothing in between: a
# plan running in the background (bench/plan_in_background.py) cannot commit a finished run under nbs/ meanwhile, so
# pause it (`pkill -STOP -f plan_in_background`) for the calls.
#
#   bash bench/gpu_slim_tree.sh on && bash bench/gpu_weights.sh   # ... the device calls ...   bash bench/gpu_slim_tree.sh off
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=.git/info/exclude
case "${1:-}" in
  on)
    git diff --cached --quiet || { echo "gpu_slim_tree: the index holds staged changes; commit or unstage them first" >&2; exit 1; }
    if pgrep -f plan_in_background >/dev/null && ps -o stat= -p "$(pgrep -f plan_in_background | head -1)" | grep -qv T; then
      echo "gpu_slim_tree: a plan is running and would fail to commit its next run; pause it first" >&2; exit 1
    fi
    grep -qx '/nbs/' "$exclude" 2>/dev/null || echo '/nbs/' >> "$exclude"
    git rm -r --cached -q nbs
    echo "gpu_slim_tree: nbs/ out of the index; the tree that travels is $(git ls-files -z | xargs -0 cat | wc -c) bytes" ;;
  off)
    sed -i '\#^/nbs/$#d' "$exclude"
    git reset -q -- nbs
    git diff --cached --quiet -- nbs && echo "gpu_slim_tree: nbs/ back in the index" ;;
  *) echo "usage: bash bench/gpu_slim_tree.sh on|off" >&2; exit 2 ;;
esac
