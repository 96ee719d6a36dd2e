#!/usr/bin/env bash
# Lint, format and type checks (the first CI step): ruff over the repository, mypy over the shared
# core (common/, kernels/), whose functions all carry type hints.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/ruff ] && [ -x .venv/bin/mypy ] || bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy cannot follow the editable install's import hook: it reads the namespace through links.
mkdir -p build/mypy/sagespec
for part in common kernels plugins; do ln -sfn "../../../$part" "build/mypy/sagespec/$part"; done
(cd build/mypy && MYPYPATH=. ../../.venv/bin/mypy --config-file ../../pyproject.toml \
    --python-executable ../../.venv/bin/python -p sagespec.common -p sagespec.kernels)
