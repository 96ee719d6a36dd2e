#!/usr/bin/env bash
# For the benchmarks' `vllm-suffix` baseline: vLLM's built-in suffix decoding needs arctic-inference
# (an sdist: its C++ suffix tree builds here in about two minutes). It goes into its own folder,
# .venv-vllm-arctic, put on PYTHONPATH for that baseline only, so the vLLM lane's environment stays as
# set up by scripts/setup_vllm.sh (arctic-inference also registers a vLLM plugin).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
[ -x "$VENV/bin/python" ] || scripts/setup_vllm.sh
"$VENV/bin/python" -m pip install -q --no-deps --target .venv-vllm-arctic arctic-inference==0.3.0
PYTHONPATH=.venv-vllm-arctic "$VENV/bin/python" -c "import arctic_inference.suffix_decoding; print('arctic-inference ready')"
