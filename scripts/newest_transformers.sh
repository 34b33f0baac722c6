#!/usr/bin/env bash
# sapo_nb pins transformers below the newest release it was tested with (settings.ini). This finds the next breaking
# release before a user does: when PyPI has a newer transformers than the one installed, a throwaway environment is
# made on top of this one (it sees every package installed here), pip upgrades only transformers there and what that
# release itself requires, and the pages that reach into transformers run against it: the seam's probes, the
# decoding loop, generation and GRPO. This environment is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
installed=$(python -c "import transformers; print(transformers.__version__)")
# SAPO_CHECK_TRANSFORMERS=<version> checks that version instead (to try this script, or a release candidate)
newest=${SAPO_CHECK_TRANSFORMERS:-$(python -m pip index versions transformers 2>/dev/null | head -1 | sed -E 's/.*\((.*)\).*/\1/' || true)}
if [ -z "$newest" ]; then echo "the package index did not answer: newest transformers not checked"; exit 0; fi
if [ "$newest" = "$installed" ]; then echo "transformers $installed is the newest release: nothing more to check"; exit 0; fi
echo "transformers $newest is out (tested: $installed); running the generation and GRPO pages against it"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python -m venv "$dir/env"
base=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
over=$("$dir/env/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$base" > "$over/sapo_base.pth"  # after the throwaway's own packages: what pip installs there comes first
if ! "$dir/env/bin/python" -m pip install -q "transformers==$newest" > "$dir/pip.log" 2>&1; then
  tail -3 "$dir/pip.log"; echo "transformers $newest could not be installed (the index, the network): not checked"; exit 0
fi
got=$("$dir/env/bin/python" -c "import transformers; print(transformers.__version__)")
if [ "$got" != "$newest" ]; then echo "transformers $newest did not take its place (got $got)"; exit 1; fi
echo "installed beside this environment: $(ls "$over" | grep -v -e '^_' -e 'pth$' -e '^pip' | tr '\n' ' ')"
for nb in nbs/05_seam.ipynb nbs/06_decoding.ipynb nbs/07_generation.ipynb nbs/08_grpo.ipynb; do
  if ! "$dir/env/bin/python" - "$nb" <<'PY'
import sys
from pathlib import Path
from nbdev.test import test_nb
ok, seconds = test_nb(Path(sys.argv[1]).resolve(), skip_flags=["notest", "slow", "cuda", "browser"])
print(f"{sys.argv[1]}: {'passes' if ok else 'FAILS'} ({seconds:.0f} s)")
sys.exit(0 if ok else 1)
PY
  then
    echo "transformers $newest breaks $nb: fix the seam (nbs/05_seam.ipynb), then raise the bound in settings.ini"
    exit 1
  fi
done
echo "transformers $newest passes: the bound in settings.ini can be raised"
