"""Peak memory of a pserver restore: this checkout against another (e.g. main's), in one run.

A restore reads a checkpoint (streamed, each tensor into its own array) and hands the arrays to
the shard. Before, the shard's tables copied every array once more, so a restore held the
snapshot and the table side by side (about twice the rows); now the snapshot's arrays become
the tables' storage. This writes one realistic checkpoint (sparse table, dim 16, Adagrad, 1M
rows; ``--quick``: 200k; plus the per-row eviction bookkeeping of an LRU table), then restores it
in fresh processes, once per checkout, measuring the restore alone: traced Python memory
(tracemalloc, which numpy reports its arrays to) and the process's peak RSS above its RSS before
the restore.

    python benchmarks/restore_peak.py [--quick] --json FILE [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BATCH = 100_000


def _specs(bounded: bool) -> list[Any]:
    from elasticps.proto import pserver_pb2

    opt = pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.ADAGRAD, lr=0.1)
    policy = (pserver_pb2.SparsePolicy(evict=pserver_pb2.SparsePolicy.LRU, max_rows=4_000_000)
              if bounded else pserver_pb2.SparsePolicy())
    return [pserver_pb2.TableSpec(name="emb", kind=pserver_pb2.TableSpec.SPARSE, dim=16,
                                  optimizer=opt, policy=policy)]


def write(directory: str, rows: int, bounded: bool) -> dict[str, Any]:
    """Train ``rows`` rows into one shard and write a full checkpoint of it."""
    from elasticps.pserver.checkpoint.files import ShardCheckpoints
    from elasticps.pserver.shard import BatchKey, ShardState

    state = ShardState(0, 1)
    state.declare(_specs(bounded))
    state.init_dense({})
    grads = np.full((BATCH, 16), 0.01, np.float32)
    for seq, start in enumerate(range(0, rows, BATCH)):
        ids = np.arange(start, min(start + BATCH, rows), dtype=np.int64)
        state.push(BatchKey(0, 0, seq), {}, {"emb": (ids, grads[:ids.size])})
    checkpoints = ShardCheckpoints(directory, 0, 1)
    checkpoints.save(state.snapshot()[0])
    data = sorted(Path(directory).rglob("*.safetensors"))[-1]
    return {"file_bytes": data.stat().st_size}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def restore(directory: str, bounded: bool) -> dict[str, Any]:
    """Load the newest checkpoint and restore a fresh shard from it; the restore's peaks."""
    from elasticps.pserver.checkpoint.files import ShardCheckpoints
    from elasticps.pserver.shard import ShardState

    state = ShardState(0, 1)
    checkpoints = ShardCheckpoints(directory, 0, 1)
    rss_before = _rss_bytes()
    tracemalloc.start()
    started = time.perf_counter()
    loaded = checkpoints.load_newest()
    assert loaded is not None
    state.restore(loaded[0], loaded[1].id)
    del loaded
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    table = state.tables["emb"]
    # ru_maxrss is KiB on Linux: the process's peak, which before the restore was rss_before.
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rows": int(table.rows), "traced_peak_bytes": int(peak),
            "rss_peak_above_start_bytes": int(peak_rss - rss_before),
            "restore_s": round(seconds, 3), "bounded": bounded}


def _child(code_root: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *args],
                         env=env, cwd=code_root, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        what, directory, bounded = sys.argv[2], sys.argv[3], sys.argv[5] == "bounded"
        result = (write(directory, int(sys.argv[4]), bounded) if what == "write"
                  else restore(directory, bounded))
        print(json.dumps(result))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200k rows instead of 1M")
    p.add_argument("--json", required=True, help="write the figures here")
    p.add_argument("--baseline", type=Path, default=None,
                   help="another checkout to restore with (e.g. /work/main): the 'before'")
    args = p.parse_args()
    rows = 200_000 if args.quick else 1_000_000
    result: dict[str, Any] = {"rows": rows, "load": os.getloadavg()[0]}
    for kind in ("unbounded", "bounded"):
        with tempfile.TemporaryDirectory() as tmp:
            # Written by this checkout; both checkouts read the same version-1 format.
            written = _child(REPO, "write", tmp, str(rows), kind)
            size = written["file_bytes"]
            result[f"{kind}_file_bytes"] = size
            runs = {"this": REPO, **({"baseline": args.baseline} if args.baseline else {})}
            for label, root in runs.items():
                got = _child(root, "restore", tmp, str(rows), kind)
                assert got["rows"] == rows, got
                result[f"{kind}_{label}_traced_peak_over_file"] = round(
                    got["traced_peak_bytes"] / size, 3)
                result[f"{kind}_{label}_rss_peak_over_file"] = round(
                    got["rss_peak_above_start_bytes"] / size, 3)
                result[f"{kind}_{label}_restore_s"] = got["restore_s"]
            if args.baseline:
                for figure in ("traced_peak_over_file", "rss_peak_over_file"):
                    result[f"{kind}_{figure}_ratio"] = round(
                        result[f"{kind}_this_{figure}"] / result[f"{kind}_baseline_{figure}"], 3)
    for key, value in result.items():
        print(f"{key:44s} {value}")
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
