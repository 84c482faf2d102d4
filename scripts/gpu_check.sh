#!/usr/bin/env bash
# The CTR demo with one trainer on the GPU against one trainer on the CPU, on the same data:
# test AUC and training samples/s of each, and the ratio. Needs a CUDA build of torch
# (PYTHON=/path/to/python with one; the .venv's torch is the CPU wheel) and a visible GPU.
#
#   scripts/gpu_check.sh                 # 1M rows, 1 pass (the README's demo size)
#   ROWS=200000 scripts/gpu_check.sh     # quicker
#   scripts/gpu_check.sh --cpu-only      # just the CPU leg (checks the script without a GPU)
#   PADDLE_COMPUTE_DTYPE=bfloat16 scripts/gpu_check.sh   # both legs under bfloat16 autocast
#
# Each leg is `elasticps run --trainers 1 --pservers 1 examples/ctr/train.py` with
# PADDLE_USE_GPU=true|false; the figures come from each job's summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
rows=${ROWS:-1000000}
batch=${BATCH_SIZE:-512}
work=${WORKDIR:-$(mktemp -d /tmp/elasticps-gpu-check.XXXXXX)}
legs=(cpu gpu)
if [ "${1:-}" = "--cpu-only" ]; then
  legs=(cpu)
elif ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: $py has torch $("$py" -c 'import torch; print(torch.__version__)') and sees no" \
       "CUDA device; run on a GPU machine with a CUDA torch (PYTHON=...), or pass --cpu-only" >&2
  exit 2
fi
echo "gpu_check: $rows rows, batch $batch, work dir $work"
"$py" -m elasticps data synth ctr --rows "$rows" --test-rows $((rows / 5 < 100000 ? rows / 5 : 100000)) \
  --seed 1 --max-vocab 100 --out "$work/data" --no-progress >/dev/null
for leg in "${legs[@]}"; do
  use_gpu=false
  [ "$leg" = gpu ] && use_gpu=true
  echo "== $leg trainer (PADDLE_USE_GPU=$use_gpu)"
  PADDLE_USE_GPU=$use_gpu "$py" -m elasticps run --trainers 1 --pservers 1 \
    --workdir "$work/$leg" examples/ctr/train.py --data "$work/data" --batch-size "$batch" \
    > "$work/$leg.log" 2>&1 || { tail -30 "$work/$leg.log" >&2; exit 1; }
done
"$py" - "$work" "${legs[@]}" <<'PY'
import json, sys
from pathlib import Path
work, legs = Path(sys.argv[1]), sys.argv[2:]
rows = {}
for leg in legs:
    summary = json.loads((work / leg / "summary.json").read_text())
    rows[leg] = (summary["auc"], summary["samples_per_sec"])
    best = summary.get("best_auc")
    best = "unknown" if best is None else f"{best:.4f}"
    print(f"{leg:>4} trainer: test AUC {summary['auc']:.4f} (best achievable {best}), "
          f"{summary['samples_per_sec']:,.0f} samples/s")
if {"cpu", "gpu"} <= rows.keys():
    print(f"gpu/cpu: samples/s x{rows['gpu'][1] / rows['cpu'][1]:.2f}, "
          f"AUC difference {rows['gpu'][0] - rows['cpu'][0]:+.4f}")
PY
