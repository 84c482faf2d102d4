"""Scale-out you can measure on one machine: real servers, many simulated trainers.

The real master (``MasterServer``: election, fenced persistence, gRPC with mutual TLS) runs in
this process over a real etcd; M real pserver processes (``python -m elasticps pserver``) hold
the CTR-DNN's tables (26 slots into one 1,000,001 x 10 sparse table, a 273-400-400-400-1 dense
MLP). N simulated trainers, packed as threads into a few worker processes, each with its own
MasterClient and PServerClient (own connections), run the real trainer task loop; only the
model's compute is replaced by a fixed-cost gradient generator of the model's shapes (a sleep of
``--compute-ms``, standing for compute done elsewhere, and precomputed gradients). Each step
pulls the batch's sparse rows and the dense values and pushes both gradients, as a trainer
without prefetch does.

For every (trainers, pservers) it reports master task round trips/s (tasks handed out and
finished: one FinishAndGetTask per task boundary, the trainer's default, or with
``--task-calls split`` a TaskFinished and a GetTask, as trainers did before it),
pserver pull and push rows/s, rows pushed per pserver CPU second (push throughput per core,
whatever else shares the machine's cores), p50/p99 push latency, errors, and how each grows
against the smallest trainer count. ``pservers 0`` rows measure the master alone: tasks of one
batch that the trainer does not train, so the task loop is all there is.

    python benchmarks/scale_sim.py [--trainers 8,32,128,256] [--pservers 0,1,2,4,8]
                                   [--task-calls combined,split] [--min-tasks N] [--quick]
                                   [--store etcd|file] [--json F]

With ``--task-calls combined,split`` every configuration runs both ways, one after the other,
and the ratios combined/split are printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import thread_cpu  # this directory's helper, found through the path set above

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.manifest import ChunkRef
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import common_pb2, master_pb2, pserver_pb2
from elasticps.pserver.client import PServerClient
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities
from elasticps.store import Store, open_store
from elasticps.store.keys import PSERVER_SLOT_PREFIX
from elasticps.store.local_etcd import LocalEtcd
from elasticps.trainer.task_batches import TaskBatch, task_batches
from elasticps.trainer.task_loop import LoopState, TaskLoop, TaskWorker

TOKEN = "scale-sim"
TABLE, SLOTS, DIM, VOCAB = "emb", 26, 10, 1_000_001
MLP = (SLOTS * DIM + 13, 400, 400, 400, 1)
REPO = Path(__file__).resolve().parent.parent
FIGURES = ("task_round_trips_per_s", "push_rows_per_s", "pull_rows_per_s",
           "push_rows_per_pserver_cpu_s")


@dataclass(frozen=True)
class SimSpec:
    """What one worker process simulates; written as JSON for ``--worker``."""

    job: str
    store_url: str
    tls_dir: str
    pservers: int
    trainers: list[str]
    batch_size: int
    compute_ms: float
    seed: int
    out: str
    split: bool = False  # finish and ask for the next task in two calls, not one


def dense_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(MLP)):
        shapes[f"mlp.{2 * i}.weight"] = (fan_out, fan_in)
        shapes[f"mlp.{2 * i}.bias"] = (fan_out,)
    return shapes


def table_specs() -> list[pserver_pb2.TableSpec]:
    adam = pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.ADAM, lr=1e-3)
    specs = [pserver_pb2.TableSpec(name=TABLE, kind=pserver_pb2.TableSpec.SPARSE,
                                   dim=DIM, id_space=VOCAB, optimizer=adam)]
    specs += [pserver_pb2.TableSpec(name=name, kind=pserver_pb2.TableSpec.DENSE,
                                    shape=list(shape), optimizer=adam)
              for name, shape in dense_shapes().items()]
    return specs


def percentile(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else None


# ----------------------------------------------------------------------- a simulated trainer


class TimedSource:
    """The master client, timing each task's round trip: from the call that asked for it to
    the end of the call that finished it. ``split``: the loop's finish-and-get is sent as a
    TaskFinished and then a GetTask (two calls, two store writes), as before FinishAndGetTask."""

    def __init__(self, client: MasterClient, split: bool = False) -> None:
        self.client = client
        self.split = split
        self.round_trips: list[float] = []
        self._asked = 0.0

    def get_task(self, pass_id: int) -> master_pb2.GetTaskResponse:
        self._asked = time.perf_counter()
        return self.client.get_task(pass_id)

    def task_finished(self, task: master_pb2.Task, records: int, batches: int) -> bool:
        accepted = self.client.task_finished(task, records, batches)
        self.round_trips.append(time.perf_counter() - self._asked)
        return accepted

    def finish_and_get(self, task: master_pb2.Task, records: int, batches: int,
                       pass_id: int) -> tuple[bool, master_pb2.GetTaskResponse]:
        if self.split:
            return self.task_finished(task, records, batches), self.get_task(pass_id)
        asked = time.perf_counter()
        accepted, following = self.client.finish_and_get(task, records, batches, pass_id)
        self.round_trips.append(time.perf_counter() - self._asked)
        self._asked = asked  # the next task was asked for by this call
        return accepted, following

    def __getattr__(self, name: str) -> Any:  # report_progress, task_failed, ... as they are
        return getattr(self.client, name)


class GradientWorker(TaskWorker):
    """Each batch: pull its sparse rows and the dense values, 'compute', push both gradients."""

    def __init__(self, params: PServerClient | None, spec: SimSpec, index: int,
                 dense_grads: dict[str, np.ndarray]) -> None:
        self.params = params
        self.compute_s = spec.compute_ms / 1e3
        rng = np.random.default_rng(spec.seed + index)
        # A Zipf head and a long tail, as CTR slots are; a few batches cycled to spare the CPU.
        self.id_batches = [np.unique(rng.zipf(1.2, spec.batch_size * SLOTS) % VOCAB)
                           for _ in range(4 if params is not None else 0)]
        self.row_grads = [rng.standard_normal((ids.size, DIM)).astype(np.float32) * 1e-3
                          for ids in self.id_batches]
        self.dense_grads = dense_grads  # read only: one copy per process
        self.steps = 0
        self.pull_rows = self.push_rows = 0
        self.pull_s: list[float] = []
        self.push_s: list[float] = []

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        if self.params is None:  # the master-only sweep: the task loop is the workload
            return
        k = self.steps % len(self.id_batches)
        ids = self.id_batches[k]
        t0 = time.perf_counter()
        self.params.pull_sparse(TABLE, ids)
        self.params.pull_dense()
        t1 = time.perf_counter()
        if self.compute_s:
            time.sleep(self.compute_s)  # the model's compute, done "elsewhere"
        ref = common_pb2.BatchRef(pass_id=item.pass_id, task_id=item.task_id, seq=item.seq)
        t2 = time.perf_counter()
        self.params.push(ref, self.dense_grads, {TABLE: (ids, self.row_grads[k])})
        t3 = time.perf_counter()
        self.pull_s.append(t1 - t0)
        self.push_s.append(t3 - t2)
        self.pull_rows += ids.size
        self.push_rows += ids.size
        self.steps += 1


def one_batch(chunk: master_pb2.Chunk, start: int) -> Iterator[range]:
    yield range(start, chunk.num_rows)  # a chunk is one batch: no data is read


def simulate_trainer(spec: SimSpec, index: int, store: Store, results: list[dict[str, Any]],
                     start: threading.Barrier, dense_grads: dict[str, np.ndarray]) -> None:
    name = spec.trainers[index]
    credentials = JobCredentials(spec.job, TOKEN, TlsIdentity.load(Path(spec.tls_dir)))
    outcome: dict[str, Any] = {"trainer": name, "error": None}
    params: PServerClient | None = None
    master: MasterClient | None = None
    worker: GradientWorker | None = None
    source: TimedSource | None = None
    try:
        if spec.pservers:
            params = PServerClient(store, credentials, spec.pservers, deadline=120, name=name)
        master = MasterClient(store, credentials, name, retry_for=120, lease_ttl=10)
        worker = GradientWorker(params, spec, index, dense_grads)
        source = TimedSource(master, split=spec.split)
        start.wait(timeout=300)
        outcome["started"] = time.time()
        master.register_trainer()
        loop = TaskLoop(source, lambda task: task_batches(task, spec.batch_size, one_batch),
                        worker, trainer_name=name, report_every=1000)
        state = loop.run()
        if state is not LoopState.DONE:
            outcome["error"] = f"the task loop ended {state.name}"
    except Exception as exc:  # counted as an error of this trainer, with what it was
        outcome["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        outcome["ended"] = time.time()
        if worker is not None and source is not None:
            outcome.update(steps=worker.steps, pull_rows=worker.pull_rows,
                           push_rows=worker.push_rows, pull_s=worker.pull_s,
                           push_s=worker.push_s, round_trips=source.round_trips)
        for client in (master, params):
            if client is not None:
                client.close()
        results.append(outcome)


class RetryCounter(logging.Handler):
    """Counts the clients' retries (overloaded servers, failovers) as they log them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def run_worker(spec_path: str) -> int:
    """``--worker SPEC``: simulate ``spec.trainers`` as threads, write their figures as JSON."""
    spec = SimSpec(**json.loads(Path(spec_path).read_text()))
    retries = RetryCounter()
    retry_log = logging.getLogger("elasticps.retry")
    retry_log.addHandler(retries)
    retry_log.setLevel(logging.DEBUG)  # a first retry is logged at DEBUG: count those too
    retry_log.propagate = False
    store = open_store(spec.store_url, spec.job)
    results: list[dict[str, Any]] = []
    cpu_started: list[float] = []
    # The CPU the trainers use from the moment all are set up (not imports and set-up).
    start = threading.Barrier(len(spec.trainers),
                              action=lambda: cpu_started.append(time.process_time()))
    rng = np.random.default_rng(spec.seed)
    dense_grads = {name: rng.standard_normal(shape).astype(np.float32) * 1e-3
                   for name, shape in dense_shapes().items()} if spec.pservers else {}
    threads = [threading.Thread(target=simulate_trainer,
                                args=(spec, i, store, results, start, dense_grads), daemon=True)
               for i in range(len(spec.trainers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    cpu_s = time.process_time() - cpu_started[0] if cpu_started else 0.0
    Path(spec.out).write_text(json.dumps({"trainers": results, "retries": retries.count,
                                          "cpu_s": cpu_s}))
    return 0


# ------------------------------------------------------------------------------- one config


class Cluster:
    """A job's real servers: M pserver processes and the master, on one store."""

    def __init__(self, root: Path, store_url: str, trainers: int, pservers: int,
                 batch_size: int, tasks_per_trainer: int) -> None:
        self.root = root
        self.job = f"sim-{uuid.uuid4().hex[:8]}"
        self.store_url = store_url
        self.pservers = pservers
        self.identities = write_job_identities(root / "tls", self.job)
        self.store = open_store(store_url, self.job)
        self.procs: list[subprocess.Popen[bytes]] = []
        num_tasks = trainers * tasks_per_trainer
        self.chunks = [ChunkRef(f"sim-{i // 64:05d}.parquet", i % 64, batch_size)
                       for i in range(num_tasks)]
        policy = QueuePolicy(task_lease=120.0, reconcile=pservers > 0)
        self.options = MasterOptions(
            job=self.job, credentials=JobCredentials(
                self.job, TOKEN, TlsIdentity.load(self.identities["master"])),
            lease_ttl=10, policy=policy, dataset="synthetic://sim", chunks_per_task=1,
            num_passes=1, batch_plan=BatchPlan(batch_size), num_pservers=pservers,
            reconcile_timeout=120.0)
        self.master: MasterServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        for i in range(self.pservers):
            env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_STORE": self.store_url,
                   "PADDLE_JOB_NAME": self.job, "PADDLE_JOB_TOKEN": TOKEN,
                   "PADDLE_NUM_PSERVERS": str(self.pservers), "PADDLE_HOST": "127.0.0.1",
                   "PADDLE_PORT": "0", "PADDLE_TLS_DIR": str(self.identities["pserver"])}
            with open(self.root / f"pserver-{i}.log", "wb") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "elasticps", "pserver"], env=env, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 120
        while len(self.store.get_prefix(PSERVER_SLOT_PREFIX)) < self.pservers:
            dead = [p.pid for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"pservers did not all start (exited: {dead}); see "
                                   f"{self.root}/pserver-*.log")
            time.sleep(0.1)  # polling the store for the slots: there is nothing to wait on
        if self.pservers:
            credentials = JobCredentials(self.job, TOKEN,
                                         TlsIdentity.load(self.identities["trainer"]))
            with PServerClient(self.store, credentials, self.pservers, deadline=120) as params:
                params.declare_tables(table_specs())
                params.initialize({name: np.zeros(shape, np.float32)
                                   for name, shape in dense_shapes().items()})
        self.master = MasterServer(self.store, self.options, lambda _url: self.chunks)
        self.thread = threading.Thread(target=self.master.run, daemon=True)
        self.thread.start()
        if not self.master.serving.wait(120):
            raise RuntimeError("the master did not start serving within 120 s")

    def stop(self) -> None:
        if self.master is not None and self.thread is not None:
            self.master.stop()
            self.thread.join(timeout=30)
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        self.store.close()


def run_config(root: Path, store_url: str, trainers: int, pservers: int, *, processes: int,
               batch_size: int, tasks_per_trainer: int, compute_ms: float,
               split: bool = False) -> dict[str, Any]:
    """Run one (trainers, pservers) job to completion; its row of figures."""
    directory = root / f"t{trainers}-p{pservers}-{'split' if split else 'combined'}"
    directory.mkdir()
    cluster = Cluster(directory, store_url, trainers, pservers, batch_size, tasks_per_trainer)
    names = [f"trainer-{i}" for i in range(trainers)]
    workers = []
    cpu: dict[str, float] = {}
    try:
        cluster.start()
        master_before = time.process_time()
        threads_before, process_before = thread_cpu.sample(), thread_cpu.process_cpu()
        pservers_before = sum(thread_cpu.process_cpu(proc.pid) for proc in cluster.procs)
        for k in range(min(processes, trainers)):
            spec = SimSpec(job=cluster.job, store_url=store_url,
                           tls_dir=str(cluster.identities["trainer"]), pservers=pservers,
                           trainers=names[k::processes], batch_size=batch_size,
                           compute_ms=compute_ms, seed=k * 7919,
                           out=str(directory / f"worker-{k}.json"), split=split)
            spec_path = directory / f"worker-{k}.spec.json"
            spec_path.write_text(json.dumps(asdict(spec)))
            with open(directory / f"worker-{k}.log", "wb") as log:
                workers.append((spec, subprocess.Popen(
                    [sys.executable, __file__, "--worker", str(spec_path)],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)))
        for _, proc in workers:
            proc.wait(timeout=3600)
        cpu["master_cpu_s"] = time.process_time() - master_before  # this process = the master
        if cluster.procs:  # read before stop(): a pserver's /proc entry goes with it
            cpu["pservers_cpu_s"] = sum(thread_cpu.process_cpu(proc.pid)
                                        for proc in cluster.procs) - pservers_before
        master_threads = thread_cpu.spent_by_name(
            threads_before, thread_cpu.sample(), thread_cpu.process_cpu() - process_before)
        state = cluster.master.master_state if cluster.master else None
        master_status = state.status() if state is not None else {}
        if state is not None:  # how well the group commit amortised its store writes
            cpu["master_calls_settled"] = state.persist_count
            cpu["master_store_txns"] = state.commits.transactions
    finally:
        for _, proc in workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        cluster.stop()
    outcomes: list[dict[str, Any]] = []
    retries = 0
    for spec, proc in workers:
        path = Path(spec.out)
        if proc.returncode != 0 or not path.exists():
            outcomes += [{"trainer": t, "error": f"worker exited {proc.returncode}"}
                         for t in spec.trainers]
            continue
        doc = json.loads(path.read_text())
        outcomes += doc["trainers"]
        retries += doc["retries"]
        cpu["trainers_cpu_s"] = cpu.get("trainers_cpu_s", 0.0) + doc["cpu_s"]
    row = {**summarise(trainers, pservers, outcomes, retries, master_status,
                       cpu.get("pservers_cpu_s")),
           "task_calls": "split" if split else "combined",
           **{key: round(value, 3) for key, value in cpu.items()}}
    txns = cpu.get("master_store_txns")
    row["calls_per_txn"] = (round(cpu["master_calls_settled"] / txns, 2) if txns else None)
    # Where the master's CPU went, by thread (rpc_N: gRPC workers running the handlers;
    # Thread-N (_serve): gRPC's dispatcher; native:event_engine: gRPC's I/O and TLS; etcd-store-
    # loop: the etcd client's watches; unattributed: threads that ended in the window).
    row["master_thread_cpu_ms_per_task"] = (
        {name: round(1e3 * seconds / row["tasks"], 3) for name, seconds in master_threads.items()}
        if row["tasks"] else {})
    row["master_cpu_ms_per_task"] = (round(1e3 * cpu["master_cpu_s"] / row["tasks"], 3)
                                     if row["tasks"] and "master_cpu_s" in cpu else None)
    return row


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1e3 * seconds, 3)


def summarise(trainers: int, pservers: int, outcomes: list[dict[str, Any]], retries: int,
              master_status: dict[str, Any], pservers_cpu_s: float | None) -> dict[str, Any]:
    started = [o["started"] for o in outcomes if "started" in o]
    wall = max(o["ended"] for o in outcomes) - min(started) if started else float("nan")
    round_trips = [x for o in outcomes for x in o.get("round_trips", [])]
    push = [x for o in outcomes for x in o.get("push_s", [])]
    pull = [x for o in outcomes for x in o.get("pull_s", [])]
    errors = [o["error"] for o in outcomes if o.get("error")]
    pushed = sum(o.get("push_rows", 0) for o in outcomes)
    row = {
        "trainers": trainers, "pservers": pservers, "wall_s": round(wall, 3),
        "tasks": len(round_trips), "steps": sum(o.get("steps", 0) for o in outcomes),
        "task_round_trips_per_s": len(round_trips) / wall,
        "push_rows_per_s": pushed / wall,
        # Push throughput per pserver core: rows pushed per CPU second the pservers spent
        # (pulls included: each step pulls what it pushes). Rows/s alone says how busy the
        # machine's cores were, shared with the trainers, not what a pserver core can do.
        "push_rows_per_pserver_cpu_s": (round(pushed / pservers_cpu_s, 1) if pservers_cpu_s
                                        else None),
        "pull_rows_per_s": sum(o.get("pull_rows", 0) for o in outcomes) / wall,
        "p50_ms": ms(percentile(push, 0.5)), "p99_ms": ms(percentile(push, 0.99)),
        "pull_p50_ms": ms(percentile(pull, 0.5)), "pull_p99_ms": ms(percentile(pull, 0.99)),
        "task_p50_ms": ms(percentile(round_trips, 0.5)),
        "task_p99_ms": ms(percentile(round_trips, 0.99)),
        "errors": len(errors), "error_samples": sorted(set(errors))[:3], "retries": retries,
        "job_state": master_status.get("state"),
        "master_persist_ms_mean": master_status.get("persist_ms_mean"),
    }
    return row


def add_growth(rows: list[dict[str, Any]]) -> None:
    """Each figure as a ratio to the same pserver count's smallest trainer count (same task
    calls)."""
    for row in rows:
        base = min((r for r in rows if r["pservers"] == row["pservers"]
                    and r["task_calls"] == row["task_calls"]), key=lambda r: r["trainers"])
        for key in FIGURES:
            row[f"{key}_vs_{base['trainers']}"] = (
                row[key] / base[key] if row.get(key) and base.get(key) else None)


def print_row(row: dict[str, Any]) -> None:
    what = "master only" if row["pservers"] == 0 else f"{row['pservers']} pserver(s)"
    print(f"{row['trainers']:4d} trainers, {what:12s}, {row['task_calls']:8s}: "
          f"{row['task_round_trips_per_s']:8.1f} tasks/s  "
          f"push {row['push_rows_per_s']:11,.0f} rows/s  pull {row['pull_rows_per_s']:11,.0f} "
          f"rows/s  push p50/p99 {row['p50_ms']}/{row['p99_ms']} ms  task p50/p99 "
          f"{row['task_p50_ms']}/{row['task_p99_ms']} ms  errors {row['errors']}  "
          f"retries {row['retries']}  ({row['wall_s']:.1f} s; CPU s master "
          f"{row.get('master_cpu_s')} ({row.get('master_cpu_ms_per_task')} ms a task, "
          f"{row.get('calls_per_txn')} calls a store txn), "
          f"pservers {row.get('pservers_cpu_s')} ({row['push_rows_per_pserver_cpu_s']} rows "
          f"pushed a CPU second), trainers {row.get('trainers_cpu_s')})", flush=True)
    top = list(row.get("master_thread_cpu_ms_per_task", {}).items())[:6]
    if top:
        print("      master CPU ms a task by thread: "
              + ", ".join(f"{name} {ms}" for name, ms in top), flush=True)


def task_call_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """combined / split for every configuration run both ways."""
    ratios = []
    for row in rows:
        if row["task_calls"] != "combined":
            continue
        split = [r for r in rows if r["task_calls"] == "split"
                 and (r["trainers"], r["pservers"]) == (row["trainers"], row["pservers"])]
        if split and split[0]["task_round_trips_per_s"]:
            base = split[0]
            cpu = (row["master_cpu_ms_per_task"] / base["master_cpu_ms_per_task"]
                   if row["master_cpu_ms_per_task"] and base["master_cpu_ms_per_task"]
                   else None)
            ratios.append({"trainers": row["trainers"], "pservers": row["pservers"],
                           "round_trips_ratio": row["task_round_trips_per_s"]
                           / base["task_round_trips_per_s"],
                           "master_cpu_per_task_ratio": cpu})
    return ratios


def task_calls(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in values if x not in ("combined", "split")]
    if not values or bad or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(
            f"{text!r} must list combined and/or split, each once")
    return values


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must list counts >= 0")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Rows with --pservers 0 measure the master alone. The trainers of a row run as "
               "threads of --processes worker processes.")
    parser.add_argument("--trainers", type=int_list, default=[8, 32, 128, 256],
                        help="simulated trainer counts (default 8,32,128,256)")
    parser.add_argument("--pservers", type=int_list, default=[0, 1, 2, 4, 8],
                        help="pserver counts; 0 = the master alone (default 0,1,2,4,8)")
    parser.add_argument("--tasks-per-trainer", type=int, default=4,
                        help="tasks (of one batch each) per trainer (default 4)")
    parser.add_argument("--master-tasks-per-trainer", type=int, default=20,
                        help="tasks per trainer in the master-only rows (default 20)")
    parser.add_argument("--min-tasks", type=int, default=0,
                        help="at least this many tasks in each row: small trainer counts get "
                             "more tasks each, so their window is not a second long "
                             "(default 0: the per-trainer counts alone)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="rows per batch: 26 sparse ids each (default 256)")
    parser.add_argument("--compute-ms", type=float, default=10.0,
                        help="the model's compute per batch, as a sleep (default 10)")
    parser.add_argument("--processes", type=int, default=4,
                        help="worker processes the trainers are packed into (default 4)")
    parser.add_argument("--task-calls", type=task_calls, default=["combined"],
                        help="combined (one FinishAndGetTask per task boundary, what trainers "
                             "do), split (TaskFinished then GetTask), or both: combined,split "
                             "runs each configuration both ways and prints the ratios")
    parser.add_argument("--store", choices=("etcd", "file"), default="etcd",
                        help="the job's store: a real etcd started here (default) or the "
                             "embedded one")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 8 and 16 trainers, 0 and 1 pserver, small batches")
    parser.add_argument("--json", help="write every row to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker(args.worker)
    if args.quick:
        args.trainers, args.pservers = [8, 16], [0, 1]
        args.tasks_per_trainer, args.master_tasks_per_trainer = 2, 5
        args.batch_size, args.processes = 64, 2
    if min(args.tasks_per_trainer, args.master_tasks_per_trainer, args.batch_size,
           args.processes) < 1:
        parser.error("--tasks-per-trainer, --master-tasks-per-trainer, --batch-size and "
                     "--processes must be >= 1")
    if args.min_tasks < 0:
        parser.error(f"--min-tasks must be >= 0, not {args.min_tasks}")
    root = Path(tempfile.mkdtemp(prefix="elasticps-scale-sim-"))
    rows: list[dict[str, Any]] = []
    etcd = LocalEtcd(root / "etcd") if args.store == "etcd" else None
    try:
        if etcd is not None:
            etcd.start()
        store_url = etcd.url if etcd is not None else f"file://{root}/job.db"
        for pservers in args.pservers:
            for trainers in args.trainers:
                tasks = max(args.tasks_per_trainer if pservers
                            else args.master_tasks_per_trainer, -(-args.min_tasks // trainers))
                for calls in args.task_calls:
                    row = run_config(root, store_url if etcd else f"file://{root}/t{trainers}"
                                     f"-p{pservers}-{calls}.db", trainers, pservers,
                                     processes=args.processes, batch_size=args.batch_size,
                                     tasks_per_trainer=tasks, compute_ms=args.compute_ms,
                                     split=calls == "split")
                    rows.append(row)
                    print_row(row)
    finally:
        if etcd is not None:
            etcd.stop()
    add_growth(rows)
    print("\nGrowth against the smallest trainer count of each pserver count:")
    for row in rows:
        base = min(r["trainers"] for r in rows if r["pservers"] == row["pservers"]
                   and r["task_calls"] == row["task_calls"])
        print(f"  {row['trainers']:4d} trainers, {row['pservers']} pservers, "
              f"{row['task_calls']}: " + ", ".join(
            f"{key} x{row[f'{key}_vs_{base}']:.2f}" for key in FIGURES
            if row[f"{key}_vs_{base}"] is not None))
    ratios = task_call_ratios(rows)
    if ratios:
        print("\nOne call per task boundary against two (combined / split):")
        for ratio in ratios:
            cpu = ratio["master_cpu_per_task_ratio"]
            print(f"  {ratio['trainers']:4d} trainers, {ratio['pservers']} pservers: round "
                  f"trips/s x{ratio['round_trips_ratio']:.2f}, master CPU per task "
                  + (f"x{cpu:.2f}" if cpu is not None else "n/a"))
    report = {"store": args.store, "cpus": os.cpu_count(), "batch_size": args.batch_size,
              "compute_ms": args.compute_ms, "rows": rows, "task_call_ratios": ratios,
              "load_average": os.getloadavg()}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if any(row["errors"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
