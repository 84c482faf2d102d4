"""Pserver throughput: sparse pull/push rows/s, dense push/pull MB/s, memory per row.

Runs one real pserver process (``elasticps pserver`` on loopback, embedded store) and the same
shard code in-process, so the difference is the cost of gRPC + encoding; the gRPC figures are
taken twice, with mutual TLS (the default) and plaintext (``--insecure``), so their ratio is the
cost of TLS. Prints medians.

    python benchmarks/pserver_throughput.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from elasticps.proto import common_pb2, pserver_pb2  # noqa: E402
from elasticps.pserver.client import PServerClient  # noqa: E402
from elasticps.pserver.shard import BatchKey, ShardState  # noqa: E402
from elasticps.rpc.credentials import JobCredentials  # noqa: E402
from elasticps.rpc.tls import TlsIdentity, write_job_identities  # noqa: E402
from elasticps.store import open_store  # noqa: E402

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
TOKEN = "bench-token"
DIM = 16


def _specs(id_space: int, dense_floats: int) -> list[pserver_pb2.TableSpec]:
    return [
        SPEC(name="emb", kind=SPEC.SPARSE, dim=DIM, id_space=id_space,
             optimizer=OPT(kind=OPT.ADAM, lr=0.001)),
        SPEC(name="dense", kind=SPEC.DENSE, shape=[dense_floats],
             optimizer=OPT(kind=OPT.ADAM, lr=0.001)),
    ]


def _median_time(fn: Callable[[int], object], reps: int) -> float:
    for i in range(8):
        fn(i)  # warm-up: every batch's rows exist, connections are up (steady state)
    times = []
    for i in range(reps):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _figures(args: argparse.Namespace, pull: float, push: float, dpull: float,
             dpush: float) -> dict[str, float]:
    mb = args.dense_floats * 4 / 1e6
    return {"sparse_pull_rows_per_s": args.batch / pull,
            "sparse_push_rows_per_s": args.batch / push,
            "dense_pull_mb_per_s": mb / dpull, "dense_push_mb_per_s": mb / dpush}


def bench_in_process(args: argparse.Namespace, batches: list[np.ndarray]) -> dict[str, float]:
    state = ShardState(0, 1)
    state.declare(_specs(args.id_space, args.dense_floats))
    state.init_dense({})
    grads = np.random.default_rng(1).normal(size=(args.batch, DIM)).astype(np.float32)
    dense_grad = np.ones(args.dense_floats, np.float32)
    seq = iter(range(10**9))
    pull = _median_time(lambda i: state.pull_sparse("emb", batches[i % len(batches)]), args.reps)
    push = _median_time(lambda i: state.push(BatchKey(0, 0, next(seq)), {}, {
        "emb": (batches[i % len(batches)], grads)}), args.reps)
    dpull = _median_time(lambda i: state.pull_dense(["dense"]), args.reps)
    dpush = _median_time(
        lambda i: state.push(BatchKey(0, 1, next(seq)), {"dense": dense_grad}, {}), args.reps)
    return _figures(args, pull, push, dpull, dpush)


def bench_grpc(args: argparse.Namespace, batches: list[np.ndarray], tmp: Path,
               tls: bool) -> dict[str, float]:
    job = "bench-tls" if tls else "bench-plain"
    store_url = f"file://{tmp}/{job}.db"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_STORE": store_url,
           "PADDLE_JOB_NAME": job, "PADDLE_JOB_TOKEN": TOKEN, "PADDLE_NUM_PSERVERS": "1",
           "PADDLE_HOST": "127.0.0.1", "PADDLE_PORT": "0"}
    credentials = JobCredentials(job, TOKEN)
    if tls:
        identities = write_job_identities(tmp / job, job)
        env["PADDLE_TLS_DIR"] = str(identities["pserver"])
        credentials = JobCredentials(job, TOKEN, TlsIdentity.load(identities["trainer"]))
    else:
        env["PADDLE_INSECURE"] = "true"
    proc = subprocess.Popen([sys.executable, "-m", "elasticps", "pserver"], env=env,
                            start_new_session=True)
    store = open_store(store_url, job)
    try:
        with PServerClient(store, credentials, 1, deadline=60) as client:
            client.declare_tables(_specs(args.id_space, args.dense_floats))
            client.initialize({})
            grads = np.random.default_rng(1).normal(size=(args.batch, DIM)).astype(np.float32)
            dense_grad = np.ones(args.dense_floats, np.float32)
            seq = iter(range(10**9))

            def ref(task: int) -> common_pb2.BatchRef:
                return common_pb2.BatchRef(pass_id=0, task_id=task, seq=next(seq))

            pull = _median_time(lambda i: client.pull_sparse("emb", batches[i % len(batches)]),
                                args.reps)
            push = _median_time(lambda i: client.push(ref(0), {}, {
                "emb": (batches[i % len(batches)], grads)}), args.reps)
            dpull = _median_time(lambda i: client.pull_dense(["dense"]), args.reps)
            dpush = _median_time(lambda i: client.push(ref(1), {"dense": dense_grad}, {}),
                                 args.reps)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        store.close()
    return _figures(args, pull, push, dpull, dpush)


def bench_memory(rows: int) -> dict[str, Any]:
    """Bytes per row of a dim-16 Adam table (2 slots) after ``rows`` rows were created."""
    out: dict[str, Any] = {"rows": rows, "ideal_bytes_per_row": DIM * 4 * (1 + 2)}
    for label, id_space in (("fixed_id_space", rows), ("unbounded_id_space", 0)):
        state = ShardState(0, 1)
        state.declare(_specs(id_space, 1))
        ids = np.arange(rows, dtype=np.int64) * (1 if id_space else 7919)
        for chunk in np.array_split(ids, max(1, rows // 100_000)):
            state.pull_sparse("emb", chunk)
        table = state.tables["emb"]
        live = table.size * (DIM * 4 * 3 + 8 + 4)  # values + 2 slots + id + Adam step
        out[label] = {"allocated_bytes_per_row": table.nbytes / rows,
                      "live_bytes_per_row": live / rows,
                      "index_bytes_per_row": table.index.nbytes / rows}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=10_000, help="ids per sparse call")
    parser.add_argument("--id-space", type=int, default=1_000_001, help="sparse id space")
    parser.add_argument("--dense-floats", type=int, default=4_000_000,
                        help="dense parameter size (floats)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per figure")
    parser.add_argument("--memory-rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.dense_floats, args.memory_rows = 5, 250_000, 100_000
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, args.id_space, args.batch).astype(np.int64) for _ in range(8)]

    in_process = bench_in_process(args, batches)
    with tempfile.TemporaryDirectory() as tmp:
        grpc_figures = bench_grpc(args, batches, Path(tmp), tls=True)
        plain_figures = bench_grpc(args, batches, Path(tmp), tls=False)
    memory = bench_memory(args.memory_rows)
    print(f"pserver throughput, dim {DIM}, {args.batch} ids per call, Adam, medians of "
          f"{args.reps} calls; dense {args.dense_floats * 4 / 1e6:.0f} MB")
    print(f"{'figure':<26} {'in-process':>14} {'gRPC+TLS':>14} {'gRPC plain':>14} "
          f"{'TLS/plain':>10} {'gRPC/in-proc':>13}")
    for key in in_process:
        ratio = grpc_figures[key] / in_process[key]
        print(f"{key:<26} {in_process[key]:>14,.0f} {grpc_figures[key]:>14,.0f} "
              f"{plain_figures[key]:>14,.0f} {grpc_figures[key] / plain_figures[key]:>10.2f} "
              f"{ratio:>13.2f}")
    print(f"memory per row ({memory['rows']:,} rows), ideal {memory['ideal_bytes_per_row']} B "
          "(dim x 4 B x (1 + 2 Adam slots)):")
    for label in ("fixed_id_space", "unbounded_id_space"):
        m = memory[label]
        print(f"  {label:<20} allocated {m['allocated_bytes_per_row']:.1f} B "
              f"(live {m['live_bytes_per_row']:.1f} B, index {m['index_bytes_per_row']:.1f} B)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"in_process": in_process, "grpc": grpc_figures, "grpc_plaintext": plain_figures,
             "memory": memory,
             "config": {k: v for k, v in vars(args).items() if k != "json"}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
