#!/usr/bin/env bash
# The reference runtime on SmolLM2-135M: plain decoding and speculative configs side by side, greedy.
# Writes benchmarks/results/reference_runtime.{json,png}. Usage: benchmarks/reference_runtime.sh [DTYPE] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
DTYPE=${1:-bfloat16}
N=${2:-20}
mkdir -p benchmarks/results
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
.venv/bin/sagespec bench --dataset mt-bench --num-prompts "$N" --max-new-tokens 128 --dtype "$DTYPE" \
    --threads 2 --out "benchmarks/results/reference_runtime_${DTYPE}.json" \
    --plot "benchmarks/results/reference_runtime_${DTYPE}.png" \
    ngram:chain ngram:dynamic ngram:sage
