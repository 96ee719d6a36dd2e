#!/usr/bin/env bash
# The vLLM lane: sets up .venv-vllm (scripts/setup_vllm.sh) and runs integration_tests/vllm against
# the real vLLM CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_vllm.sh
VENV=${VLLM_VENV:-.venv-vllm}
exec "$VENV/bin/python" -m pytest -q --durations=15 integration_tests/vllm "$@"
