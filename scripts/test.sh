#!/usr/bin/env bash
# The test command: every notebook's tests (slow/cuda/browser cells skipped), then pytest on tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
nbdev_test --n_workers 2 --timing
pytest -q tests/
