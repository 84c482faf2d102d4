#!/usr/bin/env bash
# The test command: lint, types, import layers, the Dockerfile's lint, generated-code drift,
# then the whole test suite (what CI runs).
#
#   scripts/test.sh            everything: the fast tier on every core, the whole-job tests
#                              several at a time, then the `exclusive` tests alone
#   scripts/test.sh --fast     the fast tier, about a minute: ruff, then the unit and contract
#                              tests not marked slow (no whole job), on every core (pytest-xdist)
#   scripts/test.sh ARGS...    the checks, then pytest ARGS in one run (e.g. a test file, -k sync)
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
export PATH="$PWD/.venv/bin:$PATH"
pytest=("$py" -m pytest -q -p no:cacheprovider)
if [[ "${1:-}" == "--fast" ]]; then
    shift
    echo "== ruff"; "$py" -m ruff check elasticps tests benchmarks examples scripts
    echo "== pytest: the fast tier, on every core"
    exec "${pytest[@]}" -m fast -n auto --durations=10 tests/unit tests/contract "$@"
fi
echo "== ruff"; "$py" -m ruff check elasticps tests benchmarks examples scripts
echo "== mypy"; "$py" -m mypy
echo "== import layers"; .venv/bin/lint-imports --no-cache
echo "== Dockerfile (hadolint)"; .venv/bin/hadolint Dockerfile
echo "== generated protobuf code"; PYTHON="$py" scripts/gen_protos.sh --check
if [[ $# -gt 0 ]]; then  # the tests asked for, in one run
    echo "== pytest"; exec "${pytest[@]}" --durations=30 "$@"
fi
# Three stages, each as wide as it can safely be (the whole command must stay under 20 min on 2
# cores): the fast tier on every core; the whole jobs and timed waits, one more at a time than
# there are cores (most of their time is spent waiting on leases, restarts and processes, under
# half a core on average); then the tests marked `exclusive`, one at a time with nothing beside
# them, because their verdict depends on the machine's speed (the chaos runs' liveness bounds).
# --durations: where the time goes, in every run's log.
echo "== pytest: the fast tier, on every core"; "${pytest[@]}" -m fast -n auto tests/unit tests/contract
echo "== pytest: whole jobs and timed waits, $(( $(nproc) + 1 )) at a time"
"${pytest[@]}" -m "not fast and not exclusive" -n $(( $(nproc) + 1 )) --dist loadfile --durations=20
echo "== pytest: the exclusive tests, alone"; "${pytest[@]}" -m exclusive --durations=10
