#!/usr/bin/env bash
# Regenerate elasticps/proto/*_pb2*.py(i) from the .proto files. CI runs this with --check.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
out=elasticps/proto
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  "$python" -m grpc_tools.protoc -I. --python_out="$tmp" --grpc_python_out="$tmp" \
    --mypy_out="$tmp" $out/*.proto
  if ! diff -r -q -x '*.proto' -x '__init__.py' -x '__pycache__' "$tmp/$out" "$out" >/dev/null; then
    diff -r -x '*.proto' -x '__init__.py' -x '__pycache__' "$tmp/$out" "$out" | head -20
    echo "generated protobuf code is stale: run scripts/gen_protos.sh and commit" >&2
    exit 1
  fi
  echo "generated protobuf code is up to date"
  exit 0
fi
"$python" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --mypy_out=. $out/*.proto
