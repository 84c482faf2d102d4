"""Master benchmark: GetTask/TaskFinished round trips per second, and snapshot cost.

1. Round trips: a real master (MasterServer: election, fenced persistence, gRPC) over the
   embedded store (and etcd with ``--etcd URL``); trainer threads loop GetTask + TaskFinished.
   Baseline: the same loop on the pure state machine (no gRPC, no store) in this process.
2. Snapshot cost with 100,000 chunks (1 chunk per task): initial dataset write (time, bytes,
   parts), bytes and ms per change (a GetTask delta and a TaskFinished delta), versus the bytes
   one whole-state blob would rewrite per change, and the time to load a snapshot in which
   every task has a record (the worst case: after a full pass).

    python benchmarks/master_throughput.py [--etcd etcd://127.0.0.1:2379] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.manifest import ChunkRef
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.snapshot import (
    DatasetRecord,
    QueueSnapshot,
    encode_meta,
    encode_task,
)
from elasticps.master.task_queue import Delta, QueuePolicy, TaskQueue
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from elasticps.store import open_store
from elasticps.store.api import Op, Put
from elasticps.store.election import Election
from elasticps.store.keys import master_task_key

TOKEN = "bench"


def chunks_of(n: int) -> list[ChunkRef]:
    return [ChunkRef(f"part-{i // 16:05d}.parquet", i % 16, 1000) for i in range(n)]


def baseline_state_machine(num_tasks: int, seconds: float) -> float:
    queue = TaskQueue([1000] * num_tasks, 1, 1000, batch_size=100)
    done, start, now = 0, time.perf_counter(), 0.0
    while time.perf_counter() - start < seconds:
        result, _ = queue.get_task("t", queue.pass_id, now)
        assert result.task is not None
        queue.task_finished("t", result.task.task_id, result.task.epoch, 1000, now)
        done += 1
    return done / (time.perf_counter() - start)


def round_trips(url: str, trainers: int, seconds: float, num_chunks: int) -> dict[str, Any]:
    job = f"bench-{uuid.uuid4().hex[:8]}"
    store = open_store(url, job)
    identities = write_job_identities(Path(tempfile.mkdtemp(prefix="bench-tls-")), job)
    options = MasterOptions(job=job, credentials=JobCredentials(
                                job, TOKEN, TlsIdentity.load(identities["master"])),
                            lease_ttl=5, dataset="synthetic://",
                            chunks_per_task=1, num_passes=1000, batch_plan=BatchPlan(100),
                            policy=QueuePolicy(task_lease=60.0))
    server = MasterServer(store, options, lambda _url: chunks_of(num_chunks))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    if not server.serving.wait(60):
        raise RuntimeError("the master did not start serving within 60s")
    latencies: list[list[float]] = [[] for _ in range(trainers)]
    stop = threading.Event()

    def loop(i: int) -> None:
        client = MasterClient(store, JobCredentials(
            job, TOKEN, TlsIdentity.load(identities["trainer"])), f"trainer-{i}")
        pass_id = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            response = client.get_task(pass_id)
            if response.outcome != response.TASK:
                pass_id = response.pass_id
                continue
            client.task_finished(response.task, 1000, 1)
            latencies[i].append(time.perf_counter() - t0)
        client.close()

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(trainers)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    time.sleep(seconds)  # the measurement window
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    server.stop()
    thread.join(timeout=10)
    store.close()
    flat = sorted(x for lat in latencies for x in lat)
    return {"store": url.split(":")[0], "trainers": trainers, "round_trips": len(flat),
            "round_trips_per_s": len(flat) / elapsed,
            "median_round_trip_ms": 1e3 * statistics.median(flat) if flat else None,
            "p99_round_trip_ms": 1e3 * flat[int(0.99 * (len(flat) - 1))] if flat else None}


def persist(snapshot: QueueSnapshot, queue: TaskQueue, delta: Delta) -> int:
    """Store ``delta`` as the master's service does, one transaction at a time; the bytes."""
    before = snapshot.bytes_written
    for ops in snapshot.delta_transactions(queue, delta):
        snapshot.write(ops)
    return snapshot.bytes_written - before


def snapshot_cost(url: str, num_chunks: int, changes: int) -> dict[str, Any]:
    job = f"bench-{uuid.uuid4().hex[:8]}"
    store = open_store(url, job)
    election = Election(store, "master/election", b"bench", ttl=30)
    assert election.campaign(timeout=30)

    def commit(ops: Sequence[Op]) -> None:
        election.leader_txn(ops)

    snapshot = QueueSnapshot(store, commit)
    chunks = chunks_of(num_chunks)
    dataset = DatasetRecord("file:///data/ctr", 1, 3, tuple(chunks), BatchPlan(512))
    queue = dataset.new_queue(QueuePolicy())
    t0 = time.perf_counter()
    snapshot.write_dataset(dataset, queue)
    initial_s = time.perf_counter() - t0
    initial_bytes = snapshot.bytes_written
    parts = len(store.get_prefix("master/state/chunks/"))
    get_ms, finish_ms, get_bytes, finish_bytes = [], [], [], []
    for _ in range(changes):
        result, delta = queue.get_task("t", 0, 0.0)
        t0 = time.perf_counter()
        get_bytes.append(persist(snapshot, queue, delta))
        get_ms.append(1e3 * (time.perf_counter() - t0))
        assert result.task is not None
        _, delta = queue.task_finished("t", result.task.task_id, result.task.epoch, 1000, 0.0)
        t0 = time.perf_counter()
        finish_bytes.append(persist(snapshot, queue, delta))
        finish_ms.append(1e3 * (time.perf_counter() - t0))
    # The naive design: one blob with the chunk list and every task, rewritten per change.
    blob = initial_bytes + sum(len(encode_task(queue.task_record(t))) + 30
                               for t in range(queue.num_tasks)) + len(
        encode_meta(queue.meta_record()))
    # Worst case for loading: every task has a record (as after a full pass).
    t0 = time.perf_counter()
    ops: list[Op] = [Put(master_task_key(t), encode_task(queue.task_record(t)))
                     for t in range(queue.num_tasks)]
    for start in range(0, len(ops), 100):
        commit(ops[start:start + 100])
    fill_s = time.perf_counter() - t0
    loaded = QueueSnapshot(store, commit).load(QueuePolicy(), {"t"}, 0.0)
    assert loaded is not None
    assert loaded.queue.counts()["done"] == changes
    election.resign()
    store.close()
    return {"store": url.split(":")[0], "chunks": num_chunks, "tasks": queue.num_tasks,
            "initial_write_s": initial_s, "initial_bytes": initial_bytes, "dataset_parts": parts,
            "get_task_change_bytes": statistics.median(get_bytes),
            "get_task_change_ms": statistics.median(get_ms),
            "finish_change_bytes": statistics.median(finish_bytes),
            "finish_change_ms": statistics.median(finish_ms),
            "whole_blob_bytes_per_change": blob,
            "blob_to_delta_ratio": blob / statistics.median(finish_bytes),
            "write_all_task_records_s": fill_s,
            "full_load_s": loaded.load_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--etcd", help="also measure against this etcd (etcd://host:port)")
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks for snapshot cost")
    parser.add_argument("--changes", type=int, default=500, help="changes timed per store")
    parser.add_argument("--seconds", type=float, default=10.0, help="round-trip window")
    parser.add_argument("--trainers", type=int, default=4, help="concurrent trainer threads")
    parser.add_argument("--quick", action="store_true", help="10,000 chunks, 3 s windows")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.chunks, args.changes, args.seconds = 10_000, 100, 3.0
    tmp = tempfile.mkdtemp(prefix="elasticps-bench-")
    urls = [f"file://{tmp}/rt.db"] + ([args.etcd] if args.etcd else [])
    report: dict[str, Any] = {"baseline_state_machine_per_s":
                              baseline_state_machine(10_000, min(args.seconds, 3.0))}
    print(f"state machine alone (baseline): "
          f"{report['baseline_state_machine_per_s']:,.0f} GetTask+TaskFinished per s")
    report["round_trips"] = []
    for url in urls:
        figures = round_trips(url, args.trainers, args.seconds, 50_000)
        figures["ratio_to_baseline"] = (figures["round_trips_per_s"]
                                        / report["baseline_state_machine_per_s"])
        report["round_trips"].append(figures)
        print(f"{figures['store']}: {figures['round_trips_per_s']:,.1f} round trips/s "
              f"({figures['trainers']} trainers, median {figures['median_round_trip_ms']:.2f} "
              f"ms, p99 {figures['p99_round_trip_ms']:.2f} ms per GetTask+TaskFinished)")
    report["snapshot"] = []
    for url in [f"file://{tmp}/snap.db"] + ([args.etcd] if args.etcd else []):
        figures = snapshot_cost(url, args.chunks, args.changes)
        report["snapshot"].append(figures)
        print(f"{figures['store']} snapshot, {figures['chunks']:,} chunks: initial write "
              f"{figures['initial_write_s']:.3f}s, {figures['initial_bytes']:,} bytes in "
              f"{figures['dataset_parts']} parts; per change: GetTask "
              f"{figures['get_task_change_bytes']:.0f} B / {figures['get_task_change_ms']:.2f} "
              f"ms, TaskFinished {figures['finish_change_bytes']:.0f} B / "
              f"{figures['finish_change_ms']:.2f} ms (a whole-state blob would be "
              f"{figures['whole_blob_bytes_per_change']:,} B, "
              f"{figures['blob_to_delta_ratio']:,.0f}x); full load with every task "
              f"recorded {figures['full_load_s']:.3f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
