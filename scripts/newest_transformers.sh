#!/usr/bin/env bash
# sapo_nb pins transformers below the newest release it was tested with (settings.ini). This finds the next breaking
# release before a user does: when PyPI has a newer transformers than the one installed, it is installed beside the
# environment (a folder put first on PYTHONPATH, the environment left as it was) and the pages that reach into
# transformers run against it: the seam's probes, the decoding loop, generation and GRPO.
set -euo pipefail
cd "$(dirname "$0")/.."
installed=$(python -c "import transformers; print(transformers.__version__)")
# SAPO_CHECK_TRANSFORMERS=<version> checks that version instead (to try this script, or a release candidate)
newest=${SAPO_CHECK_TRANSFORMERS:-$(python -m pip index versions transformers 2>/dev/null | head -1 | sed -E 's/.*\((.*)\).*/\1/' || true)}
if [ -z "$newest" ]; then echo "the package index did not answer: newest transformers not checked"; exit 0; fi
if [ "$newest" = "$installed" ]; then echo "transformers $installed is the newest release: nothing more to check"; exit 0; fi
echo "transformers $newest is out (tested: $installed); running the generation and GRPO pages against it"
dir=$(mktemp -d)
python -m pip install -q --target "$dir" "transformers==$newest"
got=$(PYTHONPATH="$dir" python -c "import transformers; print(transformers.__version__)")
if [ "$got" != "$newest" ]; then echo "transformers $newest did not take its place (got $got)"; exit 1; fi
for nb in nbs/05_seam.ipynb nbs/06_decoding.ipynb nbs/07_generation.ipynb nbs/08_grpo.ipynb; do
  if ! PYTHONPATH="$dir" nbdev_test --path "$nb"; then
    echo "transformers $newest breaks $nb: fix the seam (nbs/05_seam.ipynb), then raise the bound in settings.ini"
    exit 1
  fi
done
echo "transformers $newest passes: the bound in settings.ini can be raised"
