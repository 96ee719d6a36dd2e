#!/usr/bin/env bash
# The vLLM lane against every release sagespec supports (scripts/vllm_versions.py), each in its own
# environment .venv-vllm-<version>. Extra arguments go to pytest. Prints one line per release.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
failed=0
summary=""
for version in $("$PY" scripts/vllm_versions.py); do
    echo "=== vLLM $version"
    if VLLM_VERSION="$version" VLLM_VENV=".venv-vllm-$version" bash scripts/test_vllm.sh "$@"; then
        summary+="vLLM $version: passed"$'\n'
    else
        summary+="vLLM $version: FAILED"$'\n'
        failed=1
    fi
done
printf '%s' "$summary"
exit $failed
