#!/usr/bin/env bash
# The default test lane: set-up, then every test in tests/ (the real SmolLM2-135M included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q --durations=15 "$@"
