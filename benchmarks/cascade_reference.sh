#!/usr/bin/env bash
# Multi-head and self-speculative drafting in the reference runtime (SmolLM2-135M, batch 1, greedy):
# each source alone (prompt lookup, self levels, Medusa heads, the EAGLE head) and the DyTC cascade,
# training-free (self levels + lookup) and with the heads, on MT-Bench and HumanEval. Per config the
# bench reports tok/s, tau, the paired per-prompt median speedup over plain decoding, the share of
# drafted nodes accepted and the drafting time per node; a cascade also reports its router's
# per-source estimates. Writes benchmarks/results/cascade_{dataset}_{sources}.{json,png}.
# Usage: benchmarks/cascade_reference.sh [DTYPE] [N] [MAX_NEW_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
DTYPE=${1:-bfloat16}
N=${2:-10}
TOKENS=${3:-96}
mkdir -p benchmarks/results
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
for DATASET in mt-bench humaneval; do
    .venv/bin/sagespec bench --dataset "$DATASET" --num-prompts "$N" --max-new-tokens "$TOKENS" --dtype "$DTYPE" \
        --threads 2 --cascade-sources self,ngram \
        --out "benchmarks/results/cascade_${DATASET}_training_free.json" \
        --plot "benchmarks/results/cascade_${DATASET}_training_free.png" \
        ngram:chain self:chain self:sage medusa:sage eagle:sage cascade:sage
    .venv/bin/sagespec bench --dataset "$DATASET" --num-prompts "$N" --max-new-tokens "$TOKENS" --dtype "$DTYPE" \
        --threads 2 --cascade-sources self,ngram,medusa \
        --out "benchmarks/results/cascade_${DATASET}_with_medusa.json" \
        --plot "benchmarks/results/cascade_${DATASET}_with_medusa.png" \
        cascade:sage
done
