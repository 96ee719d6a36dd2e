#!/usr/bin/env bash
# One engine's lane (vllm or sglang) against every release sagespec supports
# (scripts/engine_versions.py), each in its own environment .venv-<engine>-<version>.
# Usage: bash scripts/test_matrix.sh vllm|sglang [pytest arguments]. Prints one line per release.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ENGINE=${1:?usage: test_matrix.sh vllm|sglang [pytest arguments]}
shift
UPPER=$(echo "$ENGINE" | tr a-z A-Z)
versions=$("$PY" scripts/engine_versions.py "$ENGINE") || exit 2
failed=0
summary=""
for version in $versions; do
    echo "=== $ENGINE $version"
    if env "${UPPER}_VERSION=$version" "${UPPER}_VENV=.venv-$ENGINE-$version" bash "scripts/test_$ENGINE.sh" "$@"; then
        summary+="$ENGINE $version: passed"$'\n'
    else
        summary+="$ENGINE $version: FAILED"$'\n'
        failed=1
    fi
done
printf '%s' "$summary"
exit $failed
