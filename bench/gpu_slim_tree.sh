#!/usr/bin/env bash
# A device call carries the whole working tree (at most 64 MiB with what `carry` names), and nbs/ (the notebooks and
# the committed run data, ~35 MB and growing) is most of it, while a GPU check needs only sapo_nb/, tests/ and bench/.
# `on` takes nbs/ out of the index and ignores it in the repository's info/exclude, so it stays on disk but does not
# travel (the GGUF of bench/gpu_weights.sh then goes in two parts instead of four); `off` puts the index of nbs/ back
# as HEAD has it. Run `on` right before bench/gpu_weights.sh and the calls, `off` right after them, and commit nothing
# in between: a plan running in the background (bench/plan_in_background.py) could not commit a finished run under
# nbs/ meanwhile, so `on` refuses while one runs: pause it first, as a command of its own, and let it go on after `off`:
#   kill -STOP $(pgrep -f '^[^ ]*python[^ ]* .*plan_in_background')   ...   (the same with -CONT after `off`)
#
#   bash bench/gpu_slim_tree.sh on && bash bench/gpu_weights.sh   # ... the device calls ...   bash bench/gpu_slim_tree.sh off
set -euo pipefail
cd "$(dirname "$0")/.."
RUNNER='^[^ ]*python[^ ]* .*plan_in_background'  # the runner's Python, not a shell whose command names it
exclude=$(git rev-parse --git-path info/exclude)
marker=$(git rev-parse --git-path sapo-slim-tree)  # holds the HEAD that `on` saw
case "${1:-}" in
  on)
    [ ! -e "$marker" ] || { echo "gpu_slim_tree: already on (since HEAD $(cat "$marker")); run 'off' first" >&2; exit 1; }
    git diff --cached --quiet || { echo "gpu_slim_tree: the index holds staged changes; commit or unstage them first" >&2; exit 1; }
    for pid in $(pgrep -f "$RUNNER" || true); do
      if ! ps -o stat= -p "$pid" | grep -q T; then
        echo "gpu_slim_tree: a plan is running (pid $pid) and could not commit its next run; pause it first" >&2; exit 1
      fi
    done
    mkdir -p "$(dirname "$exclude")"
    git rev-parse HEAD > "$marker"
    grep -qx '/nbs/' "$exclude" 2>/dev/null || echo '/nbs/' >> "$exclude"
    git rm -r --cached -q nbs
    echo "gpu_slim_tree: nbs/ out of the index; the tree that travels is $(git ls-files -z | xargs -0 cat | wc -c) bytes" ;;
  off)
    [ -e "$marker" ] || { echo "gpu_slim_tree: not on (no $marker); nothing to put back" >&2; exit 1; }
    [ "$(git rev-parse HEAD)" = "$(cat "$marker")" ] || {
      echo "gpu_slim_tree: HEAD moved since 'on' ($(cat "$marker")); check that no commit dropped nbs/, then run" \
           "'git reset -q -- nbs', remove '/nbs/' from $exclude and delete $marker" >&2; exit 1; }
    sed -i '\#^/nbs/$#d' "$exclude"
    git reset -q -- nbs
    rm -f "$marker"
    if git diff --cached --quiet -- nbs && [ -n "$(git ls-files nbs | head -1)" ]; then echo "gpu_slim_tree: nbs/ back in the index"
    else echo "gpu_slim_tree: nbs/ is not as HEAD has it in the index; see git status" >&2; exit 1; fi ;;
  *) echo "usage: bash bench/gpu_slim_tree.sh on|off" >&2; exit 2 ;;
esac
