#!/usr/bin/env bash
# The SGLang lane: sets up .venv-sglang (scripts/setup_sglang.sh) and runs integration_tests/sglang
# against the real SGLang package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_sglang.sh
VENV=${SGLANG_VENV:-.venv-sglang}
exec "$VENV/bin/python" -m pytest -q --durations=15 integration_tests/sglang "$@"
