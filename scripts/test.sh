#!/usr/bin/env bash
# The test command: lint, types, import layers, the Dockerfile's lint, generated-code drift,
# then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; "$py" -m ruff check elasticps tests benchmarks examples scripts
echo "== mypy"; "$py" -m mypy
echo "== import layers"; .venv/bin/lint-imports --no-cache
echo "== Dockerfile (hadolint)"; .venv/bin/hadolint Dockerfile
echo "== generated protobuf code"; PYTHON="$py" scripts/gen_protos.sh --check
echo "== pytest"; "$py" -m pytest -q -p no:cacheprovider "$@"
