"""The applied-batch set (exactly-once bookkeeping) as arrays: this checkout against another's
(e.g. main's dict of Python objects), in one run.

    python benchmarks/applied_set.py [--quick] --json FILE [--baseline /work/main]

A shard records every applied batch per (pass, task): a watermark, the seqs above it and a count.
For 200k tasks of 5 batches (``--quick``: 20k), pushed in order, each checkout reports: the
traced memory the set holds per task, a push's ``contains`` + ``add`` (microseconds, inside a
task and for a task's first batch), and ``copy()`` and ``to_arrays()``, which a checkpoint's
snapshot runs under the shard lock (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCHES = 5


def measure(tasks: int) -> dict[str, Any]:
    from elasticps.pserver.applied import AppliedSet

    tracemalloc.start()
    applied = AppliedSet()
    first = later = 0.0
    for task in range(tasks):
        for seq in range(BATCHES):
            started = time.perf_counter()
            if not applied.contains(0, task, seq):
                applied.add(0, task, seq)
            took = time.perf_counter() - started
            first, later = (first + took, later) if seq == 0 else (first, later + took)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    started = time.perf_counter()
    applied.copy()
    copy_s = time.perf_counter() - started
    started = time.perf_counter()
    applied.to_arrays()
    arrays_s = time.perf_counter() - started
    assert len(applied) == tasks * BATCHES
    return {"bytes_per_task": round(held / tasks, 1),
            "first_batch_us": round(first / tasks * 1e6, 2),
            "later_batch_us": round(later / (tasks * (BATCHES - 1)) * 1e6, 2),
            "copy_ms": round(copy_s * 1e3, 2), "to_arrays_ms": round(arrays_s * 1e3, 2)}


def _child(code_root: Path, tasks: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(tasks)],
                         env=env, cwd=code_root, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure(int(sys.argv[2]))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20k tasks instead of 200k")
    p.add_argument("--json", required=True, help="write the figures here")
    p.add_argument("--baseline", type=Path, default=None,
                   help="another checkout to measure too (e.g. /work/main)")
    args = p.parse_args()
    tasks = 20_000 if args.quick else 200_000
    result: dict[str, Any] = {"tasks": tasks, "batches_per_task": BATCHES,
                              "load": os.getloadavg()[0]}
    this = _child(REPO, tasks)
    result.update({f"this_{k}": v for k, v in this.items()})
    if args.baseline:
        base = _child(args.baseline, tasks)
        result.update({f"baseline_{k}": v for k, v in base.items()})
        result.update({f"{k}_ratio": round(this[k] / base[k], 3) for k in this if base[k]})
    for key, value in result.items():
        print(f"{key:28s} {value}")
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
