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
# --durations: where the time goes, in every run's log (the whole command must stay under 20 min).
echo "== pytest"; "$py" -m pytest -q -p no:cacheprovider --durations=30 "$@"
