"""Persistence of the task queue in the store, by parts, so a change writes only what changed.

Layout (keys relative to the job prefix)::

    master/state/dataset            header JSON: url, chunks_per_task, num_passes, the batch
                                    plan (batch_size, shuffle_seed, features), num_chunks,
                                    parts, sha256 of the parts; written once, LAST (commit mark)
    master/state/chunks/<k:06d>     part k of the chunk list (~256 KiB each, paths deduplicated)
    master/state/meta               pass, finished, failed reason, counters, save-model grant
    master/state/task/<id:08d>      one small JSON record per task ever dispatched
    master/state/failed/<p:06d>-<id:08d>  the reason a task went FAILED in pass p
    master/state/accounting/<p:06d> the last reconciliation of pass p: per shard expected,
                                    held, missing, duplicate and unexpected batches
    master/state/stream, .../partition/<k:08d>   a stream's position and appended partitions
                                    (stream_records.py); the header then lists no chunks

Every write goes through a ``commit(ops)`` callable that applies the ops in one store
transaction conditioned on still holding the election lock (``Election.leader_txn``), so a
deposed master cannot write. A delta with more ops than ``max_ops`` (etcd allows 128 per txn)
is split; the meta record goes in the last transaction, together with any record that must
change with it (the accounting that ends a pass), so a pass ends atomically. A master that dies
between the transactions of a split delta leaves some task records written and the meta not:
:meth:`TaskQueue.restore` reads such a state consistently (recovery dispatches written under a
meta still ``reconciling`` mean the reconciliation is over and its work is left). Loading reads
the task records in ranges of 10,000 keys (``task/0000``..``task/0009``) to keep every response
small.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from elasticps.data.batch_plan import BatchPlan, first_batches
from elasticps.data.manifest import ChunkRef
from elasticps.errors import DataError, StoreError
from elasticps.master.stream_catalog import StreamCatalog
from elasticps.master.stream_follow import AppendedPartition, StreamPosition
from elasticps.master.stream_records import encode_position, load_stream
from elasticps.master.task_queue import (
    Delta,
    FailureEntry,
    MetaRecord,
    QueuePolicy,
    SaveGrant,
    TaskQueue,
    TaskRecord,
    TaskState,
)
from elasticps.store.api import Delete, Op, Put, Store
from elasticps.store.keys import (
    MASTER_STATE_ACCOUNTING_PREFIX,
    MASTER_STATE_DATASET,
    MASTER_STATE_FAILED_PREFIX,
    MASTER_STATE_META,
    MASTER_STATE_PREFIX,
    MASTER_STATE_STREAM,
    MASTER_TASKS_PER_RANGE,
    master_accounting_key,
    master_chunks_part_key,
    master_failed_key,
    master_task_key,
    master_task_range,
)

FORMAT_VERSION = 2  # 2: the dataset header pins the batch plan; task records carry no count

Commit = Callable[[Sequence[Op]], None]


@dataclass(frozen=True)
class StreamSpec:
    """A job trained on a stream (docs/data.md): partitions before ``start`` (a backfill's
    ``--from``) are passed over."""

    start: str = ""


@dataclass(frozen=True)
class DatasetRecord:
    url: str
    chunks_per_task: int
    num_passes: int
    chunks: tuple[ChunkRef, ...]  # a stream's are its partitions' (StreamCatalog)
    plan: BatchPlan
    stream: StreamSpec | None = None  # a stream at ``url``: one pass over what lands

    def differences(self, url: str, chunks_per_task: int, num_passes: int,
                    plan: BatchPlan, stream: StreamSpec | None = None) -> list[str]:
        """What a SetDataset asking for these differs in from this job (empty: the same)."""
        found = [f"{name}={ours!r}, not {theirs!r}" for name, ours, theirs in (
            ("dataset_url", self.url, url), ("chunks_per_task", self.chunks_per_task,
                                             chunks_per_task),
            ("num_passes", self.num_passes, num_passes), ("stream", self.stream, stream))
            if ours != theirs]
        return found + self.plan.differences(plan)

    @functools.cached_property
    def first_batches(self) -> list[int]:
        """Each chunk's first batch in a pass, and the pass's batch count last."""
        return first_batches([c.num_rows for c in self.chunks], self.plan.batch_size)

    def new_queue(self, policy: QueuePolicy | None) -> TaskQueue:
        return TaskQueue([c.num_rows for c in self.chunks], self.chunks_per_task,
                         self.num_passes, policy, batch_size=self.plan.batch_size,
                         stream=self.stream is not None)

    # -- the chunks of a task message (service.TaskChunks; a stream's: StreamCatalog) -------

    def chunk_slice(self, first: int, count: int) -> Sequence[ChunkRef]:
        return self.chunks[first:first + count]

    def first_batch(self, chunk: int) -> int:
        return self.first_batches[chunk]

    @property
    def pass_batches(self) -> int:
        return self.first_batches[-1]

    def partition_at(self, chunk: int) -> AppendedPartition | None:
        return None

    @property
    def schema_partition(self) -> str:
        return ""


@dataclass(frozen=True)
class LoadedState:
    dataset: DatasetRecord
    queue: TaskQueue
    delta: Delta  # changes made while loading (tasks of vanished trainers released)
    load_seconds: float
    catalog: StreamCatalog | None = None  # a stream's appended partitions


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode_task(rec: TaskRecord) -> bytes:
    doc: dict[str, Any] = {"s": rec.state.value, "p": rec.pass_id, "e": rec.epoch,
                           "o": rec.owner, "r": rec.records_done, "f": rec.failures}
    if rec.last_error:
        doc["x"] = rec.last_error
    if rec.only_batches:
        doc["b"] = list(rec.only_batches)
    return _dumps(doc)


def decode_task(raw: bytes) -> TaskRecord:
    doc = json.loads(raw)
    return TaskRecord(TaskState(doc["s"]), int(doc["p"]), int(doc["e"]), str(doc["o"]),
                      int(doc["r"]), int(doc["f"]), str(doc.get("x", "")),
                      tuple(int(b) for b in doc.get("b", ())))


def encode_meta(meta: MetaRecord) -> bytes:
    save = None if meta.save is None else {"holder": meta.save.holder,
                                           "seconds": meta.save.seconds}
    return _dumps({"version": FORMAT_VERSION, "pass": meta.pass_id, "finished": meta.finished,
                   "failed_reason": meta.failed_reason, "records_total": meta.records_total,
                   "tasks_finished_total": meta.tasks_finished_total,
                   "failures_total": meta.failures_total, "save": save,
                   "reconciling": meta.reconciling, "recoveries_total": meta.recoveries_total,
                   "open": meta.open})


def decode_meta(raw: bytes) -> MetaRecord:
    doc = json.loads(raw)
    save = doc.get("save")
    return MetaRecord(int(doc["pass"]), bool(doc["finished"]), str(doc["failed_reason"]),
                      int(doc["records_total"]), int(doc["tasks_finished_total"]),
                      int(doc["failures_total"]),
                      None if save is None else SaveGrant(str(save["holder"]),
                                                          float(save["seconds"])),
                      bool(doc.get("reconciling", False)), int(doc.get("recoveries_total", 0)),
                      bool(doc.get("open", False)))


def _chunk_parts(chunks: Sequence[ChunkRef], part_bytes: int) -> Iterator[bytes]:
    """Chunk list parts of about ``part_bytes``; each part lists its distinct paths once."""
    paths: dict[str, int] = {}
    rows: list[list[int]] = []
    size = 0
    for chunk in chunks:
        if chunk.path not in paths:
            paths[chunk.path] = len(paths)
            size += len(chunk.path) + 4
        rows.append([paths[chunk.path], chunk.row_group, chunk.num_rows])
        size += 24
        if size >= part_bytes:
            yield _dumps({"paths": list(paths), "chunks": rows})
            paths, rows, size = {}, [], 0
    if rows:
        yield _dumps({"paths": list(paths), "chunks": rows})


def _decode_part(raw: bytes) -> list[ChunkRef]:
    doc = json.loads(raw)
    paths = doc["paths"]
    return [ChunkRef(paths[p], int(rg), int(n)) for p, rg, n in doc["chunks"]]


class QueueSnapshot:
    """Reads and writes the master's state under ``master/state/``."""

    def __init__(self, store: Store, commit: Commit, *, max_ops: int = 100,
                 part_bytes: int = 256 * 1024) -> None:
        self.store = store
        self.commit = commit
        self.max_ops = max_ops
        self.part_bytes = part_bytes
        self.bytes_written = 0
        self.txns = 0

    # ------------------------------------------------------------------------------ writing

    def write(self, ops: Sequence[Op]) -> None:
        """Commit ``ops`` in one fenced transaction, counting what was written."""
        self.commit(ops)
        self.txns += 1
        self.bytes_written += sum(len(op.key) + len(op.value) for op in ops
                                  if isinstance(op, Put))

    def write_dataset(self, dataset: DatasetRecord, queue: TaskQueue) -> None:
        """Write a new job's dataset and initial meta: parts first, then the header (the
        commit mark), so a master killed half-way leaves no header and starts over."""
        self.write([Delete(MASTER_STATE_PREFIX, prefix=True)])
        digest = hashlib.sha256()
        parts = 0
        for parts, part in enumerate(_chunk_parts(dataset.chunks, self.part_bytes), start=1):
            digest.update(part)
            self.write([Put(master_chunks_part_key(parts - 1), part)])
        header = {"version": FORMAT_VERSION, "url": dataset.url,
                  "chunks_per_task": dataset.chunks_per_task, "num_passes": dataset.num_passes,
                  "plan": dataset.plan.to_dict(), "num_chunks": len(dataset.chunks),
                  "parts": parts,
                  "sha256": digest.hexdigest()}
        last: list[Op] = [Put(MASTER_STATE_META, encode_meta(queue.meta_record()))]
        if dataset.stream is not None:
            header["stream"] = {"from": dataset.stream.start}
            last.append(Put(MASTER_STATE_STREAM, encode_position(StreamPosition())))
        self.write([*last, Put(MASTER_STATE_DATASET, _dumps(header))])

    @staticmethod
    def accounting_op(pass_id: int, doc: dict[str, Any]) -> Op:
        """The record of a pass's last reconciliation (the exactly-once accounting), to be
        written with the delta it decided (:meth:`delta_transactions`'s ``with_meta``)."""
        return Put(master_accounting_key(pass_id), _dumps(doc))

    def ops_for(self, queue: TaskQueue, delta: Delta) -> tuple[list[Op], list[Op]]:
        """(task and failure records, the meta record): the meta is written last."""
        ops: list[Op] = [Put(master_task_key(t), encode_task(queue.task_record(t)))
                         for t in sorted(delta.tasks)]
        ops.extend(Put(master_failed_key(e.pass_id, e.task_id), e.reason.encode())
                   for e in delta.failures)
        meta: list[Op] = ([Put(MASTER_STATE_META, encode_meta(queue.meta_record()))]
                          if delta.meta else [])
        return ops, meta

    def delta_transactions(self, queue: TaskQueue, delta: Delta,
                           with_meta: Sequence[Op] = ()) -> list[list[Op]]:
        """The transactions that persist what ``delta`` says changed, in order: task and
        failure records first if they do not all fit, then the meta record with ``with_meta``
        (one transaction when it all fits). Encoded now, from ``queue`` as it is."""
        records, meta = self.ops_for(queue, delta)
        last = [*meta, *with_meta]
        if not records and not last:
            return []
        if len(last) > self.max_ops:
            raise StoreError(f"{len(last)} records must be written atomically, more than one "
                             f"transaction's {self.max_ops}")
        cut = max(0, len(records) + len(last) - self.max_ops)
        txns = [records[start:min(start + self.max_ops, cut)]
                for start in range(0, cut, self.max_ops)]
        return [*txns, [*records[cut:], *last]]

    # ------------------------------------------------------------------------------ reading

    def load_dataset(self) -> DatasetRecord | None:
        """The committed dataset, or None if no job was started (or the start was cut)."""
        kv = self.store.get(MASTER_STATE_DATASET)
        if kv is None:
            return None
        header = json.loads(kv.value)
        if header.get("version") != FORMAT_VERSION:
            raise StoreError(f"master state format {header.get('version')!r} is not "
                             f"{FORMAT_VERSION}; this master cannot resume it")
        digest = hashlib.sha256()
        chunks: list[ChunkRef] = []
        for k in range(int(header["parts"])):
            part = self.store.get(master_chunks_part_key(k))
            if part is None:
                raise DataError(f"master state part {master_chunks_part_key(k)} is missing")
            digest.update(part.value)
            chunks.extend(_decode_part(part.value))
        if digest.hexdigest() != header["sha256"] or len(chunks) != header["num_chunks"]:
            raise DataError("the master's stored chunk list does not match its checksum")
        stream = header.get("stream")
        return DatasetRecord(str(header["url"]), int(header["chunks_per_task"]),
                             int(header["num_passes"]), tuple(chunks),
                             BatchPlan.from_dict(header["plan"]),
                             None if stream is None else StreamSpec(str(stream["from"])))

    def load(self, policy: QueuePolicy | None, live_trainers: set[str],
             now: float) -> LoadedState | None:
        """Rebuild the queue from the store; None if no dataset was ever committed."""
        started = time.perf_counter()
        dataset = self.load_dataset()
        if dataset is None:
            return None
        meta_kv = self.store.get(MASTER_STATE_META)
        if meta_kv is None:
            raise DataError(f"master state has a dataset but no {MASTER_STATE_META}")
        catalog = fresh = None
        if dataset.stream is not None:
            catalog, fresh = self._load_stream(dataset, policy)
        records: dict[int, TaskRecord] = {}
        num_tasks = (fresh.num_tasks if fresh is not None
                     else -(-len(dataset.chunks) // dataset.chunks_per_task))
        for first in range(0, num_tasks, MASTER_TASKS_PER_RANGE):
            for kv in self.store.get_prefix(master_task_range(first)):
                records[int(kv.key.rsplit("/", 1)[1])] = decode_task(kv.value)
        failures = []
        for kv in self.store.get_prefix(MASTER_STATE_FAILED_PREFIX):
            pass_text, task_text = kv.key.rsplit("/", 1)[1].split("-")
            failures.append(FailureEntry(int(pass_text), int(task_text), kv.value.decode()))
        queue, delta = TaskQueue.restore(
            [c.num_rows for c in dataset.chunks], dataset.chunks_per_task, dataset.num_passes,
            policy, decode_meta(meta_kv.value), records, failures, live_trainers, now,
            batch_size=dataset.plan.batch_size, stream=fresh)
        return LoadedState(dataset, queue, delta, time.perf_counter() - started, catalog)

    def _load_stream(self, dataset: DatasetRecord, policy: QueuePolicy | None
                     ) -> tuple[StreamCatalog, TaskQueue]:
        """A stream's catalogue and a fresh queue with its partitions appended again."""
        assert dataset.stream is not None
        position, partitions = load_stream(self.store)
        catalog = StreamCatalog(dataset.plan.batch_size, dataset.stream.start)
        queue = dataset.new_queue(policy)
        for partition in partitions:
            ids, _ = queue.append([c.num_rows for c in partition.chunks])
            catalog.add(partition, ids, position)
        catalog.position = position
        return catalog, queue


def load_accounting(store: Store) -> dict[int, dict[str, Any]]:
    """Every pass's last reconciliation record, by pass
    (see :meth:`QueueSnapshot.accounting_op`)."""
    return {int(kv.key.rsplit("/", 1)[1]): json.loads(kv.value)
            for kv in store.get_prefix(MASTER_STATE_ACCOUNTING_PREFIX)}
