#!/usr/bin/env bash
# The support table: every supported engine release and the newest on the package index, each
# checked statically against its wheel's source (fetched once, without dependencies) and marked
# with the lane that runs it. Fails when a supported release fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
exec .venv/bin/python scripts/check_engines.py "$@"
