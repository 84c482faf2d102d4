"""The ``Master`` gRPC servicer: the task queue, persisted before every answer.

Every handler that steps the :class:`~elasticps.master.task_queue.TaskQueue` does so in one
:meth:`MasterState.queue_step`: under one lock it steps the queue and stages the resulting
delta's writes (:class:`~elasticps.master.snapshot.QueueSnapshot`'s fenced transactions) with
the :class:`~elasticps.master.group_commit.GroupCommit`; leaving the step it leaves the lock,
waits until its change is stored (in one transaction with those of calls that came meanwhile)
and only then answers. If the write cannot be made the caller gets an error, never
an acknowledgement: NotLeaderError (we were deposed) answers UNAVAILABLE so the client goes to
the new master, and marks this servicer :attr:`deposed` so the process exits and is restarted
from the store.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import grpc

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.locations import check_scheme
from elasticps.data.manifest import ChunkRef, read_manifest
from elasticps.data.stream import (
    MAX_PARTITION_NAME,
    FsspecPartitionSource,
    PartitionSource,
)
from elasticps.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotLeaderError,
    StoreUnavailableError,
)
from elasticps.master.group_commit import GroupCommit
from elasticps.master.progressive import PartitionTasks
from elasticps.master.reconcile_policy import Reconciliation
from elasticps.master.snapshot import DatasetRecord, LoadedState, QueueSnapshot, StreamSpec
from elasticps.master.stream_catalog import StreamCatalog
from elasticps.master.stream_follow import AppendedPartition, FollowDecision
from elasticps.master.stream_records import append_ops
from elasticps.master.task_queue import (
    Delta,
    GetTaskResult,
    Outcome,
    QueuePolicy,
    Reply,
    TaskQueue,
    TaskView,
)
from elasticps.proto import master_pb2, master_pb2_grpc
from elasticps.retry import RetryPolicy
from elasticps.rpc.fields import check_name, clip_text
from elasticps.rpc.server import rpc_handler
from elasticps.store.api import Op, Put
from elasticps.store.keys import SEALED_PASSES, SealedPasses

log = logging.getLogger(__name__)

# The master's one view of the data: a dataset URL -> its chunks (a manifest read, no data).
ChunkLister = Callable[[str], Sequence[ChunkRef]]
# ... and of a stream: its prefix -> the source its partitions are listed from.
SourceFactory = Callable[[str], PartitionSource]
THROUGHPUT_WINDOW_S = 30.0
# The job's states in the status document (its "state"), in the order a job reaches them;
# the metric elasticps_master_job_state{state} is one-hot over them.
JOB_STATES = ("waiting_for_dataset", "running", "succeeded", "failed")
MAX_URL = 4096
# A store outage is waited out briefly, lock held (no answer goes out unpersisted); past the
# deadline the master gives up the lead and a standby, or its restart, resumes from the store.
PERSIST_RETRY = RetryPolicy(deadline=5.0, initial_backoff=0.05, max_backoff=1.0,
                            retryable=(StoreUnavailableError,))


def data_chunk_lister(url: str, schemes: Sequence[str] = ("file",)) -> Sequence[ChunkRef]:
    """The chunks of the dataset at ``url``, from its manifest; ``url`` (sent by a trainer)
    must use one of the job's allowed ``schemes`` (PADDLE_DATA_SCHEMES)."""
    if len(url) > MAX_URL:
        raise InvalidArgumentError(f"a dataset URL of {len(url)} characters is too long")
    return read_manifest(check_scheme(url, schemes)).chunks


def fsspec_source(url: str, schemes: Sequence[str] = ("file",)) -> PartitionSource:
    """The partition source of the stream at ``url`` (a listing of its prefix); ``url`` must
    use one of the job's allowed ``schemes``, as a dataset's must."""
    if len(url) > MAX_URL:
        raise InvalidArgumentError(f"a stream URL of {len(url)} characters is too long")
    return FsspecPartitionSource(check_scheme(url, schemes))


class QueueStep:
    """One call's step of the serving queue, made in :meth:`MasterState.queue_step`: the
    handler steps :attr:`queue` for :attr:`trainer` at :attr:`now` and hands the delta to
    :meth:`stage`."""

    def __init__(self, state: MasterState, queue: TaskQueue, trainer: str) -> None:
        self._state = state
        self.queue = queue
        self.trainer = trainer
        self.now = state.clock()
        self.ticket: int | None = None
        self.finished_records: int | None = None

    def stage(self, delta: Delta) -> None:
        """Stage ``delta``'s writes; the step waits for them before the handler answers."""
        self.ticket = self._state.stage(delta)

    def count_finish(self, reply: Reply, records: int) -> None:
        """Count ``records`` in the throughput once stored, if this call finished the task
        (the queue's ``done_now``: a repeated or stale finish counts nothing)."""
        if reply.done_now:
            self.finished_records = records

    def task_response(self, result: GetTaskResult) -> master_pb2.GetTaskResponse:
        """The GetTask answer for ``result``, built from the queue as this step left it."""
        return get_task_response(result, self._state.task_chunks(),
                                 self.queue.policy.task_lease)


class MasterState:
    """The leader's in-memory queue plus the persistence of its changes; thread-safe."""

    def __init__(self, job: str, node: str, snapshot: QueueSnapshot, policy: QueuePolicy,
                 chunk_lister: ChunkLister, *, clock: Callable[[], float] = time.monotonic,
                 persist_retry_s: float = 5.0,
                 source_for: SourceFactory | None = None) -> None:
        self.job = job
        self.node = node
        self.snapshot = snapshot
        self.policy = policy
        self.chunk_lister = chunk_lister
        self.source_for = source_for  # None: this master follows no stream
        self.clock = clock
        self.persist_retry = PERSIST_RETRY.within(persist_retry_s)
        self.commits = GroupCommit(self._write, snapshot.max_ops)
        self.lock = threading.RLock()
        self.deposed = threading.Event()
        self.dataset: DatasetRecord | None = None
        self.queue: TaskQueue | None = None
        self.catalog: StreamCatalog | None = None  # a stream's appended partitions
        self.source: PartitionSource | None = None  # where they come from
        # What the stream's follow loop last saw (not persisted: it looks again each poll).
        self.follow: dict[str, Any] = {}
        self.live_trainers: set[str] = set()
        self.started = clock()
        self._finishes: collections.deque[tuple[float, int]] = collections.deque()
        self.persist_seconds = 0.0
        self.persist_count = 0
        self.accounting: dict[int, dict[str, Any]] = {}  # pass -> its last reconciliation
        # Set once a trainer's call left a pass waiting for reconciliation: the reconciler
        # starts at once instead of at its next poll.
        self.reconcile_wanted = threading.Event()

    # ---------------------------------------------------------------------------- lifecycle

    def install(self, loaded: LoadedState) -> None:
        with self.lock:
            self.dataset, self.queue = loaded.dataset, loaded.queue
            self.catalog = loaded.catalog
            if loaded.catalog is not None:
                self.source = self._source(loaded.dataset.url)
            self.persist(loaded.delta)

    def _source(self, url: str) -> PartitionSource:
        if self.source_for is None:
            raise FailedPreconditionError(f"master {self.node} of job {self.job} was started "
                                          "without a partition source: it cannot follow a "
                                          "stream")
        return self.source_for(url)

    def task_chunks(self) -> TaskChunks | None:
        """Where a task's chunks are looked up: a stream's catalogue, else the dataset."""
        return self.catalog if self.catalog is not None else self.dataset

    def stage(self, delta: Delta, with_meta: Sequence[Op] = ()) -> int:
        """Encode ``delta`` (and ``with_meta``, with the meta record) for the group commit;
        the ticket an answer must :meth:`settle` before it goes out.

        Called with the lock held, so the writes describe the queue as this call left it. A
        call that changed nothing gets the newest ticket: its answer may rest on changes
        staged before it.
        """
        if (delta.empty and not with_meta) or self.queue is None:
            return self.commits.latest()
        ticket = 0
        for ops in self.snapshot.delta_transactions(self.queue, delta, with_meta):
            ticket = self.commits.stage(ops)
        return ticket

    def settle(self, ticket: int) -> None:
        """Block until every change staged up to ``ticket`` is stored (called without the
        lock, so other calls stage theirs meanwhile and share the transaction); give up the
        lead if the store refuses or stays unreachable."""
        started = self.clock()
        try:
            self.commits.wait(ticket)
        except NotLeaderError:
            self._depose("a write was fenced off: another master holds the lock")
            raise
        except StoreUnavailableError as exc:
            self._depose(f"the store was unreachable for {self.persist_retry.deadline:g}s")
            raise NotLeaderError(
                f"master {self.node} of job {self.job} could not persist a change: {exc}"
            ) from exc
        with self.lock:
            self.persist_seconds += self.clock() - started
            self.persist_count += 1

    @contextlib.contextmanager
    def queue_step(self, trainer: str) -> Iterator[QueueStep]:
        """The one way a trainer's call steps the serving queue: the body runs under the lock,
        on the queue :meth:`check_serving` returns, for ``trainer`` (checked as a name), and
        stages its delta with the step; after the lock is released the step waits until that
        change is stored (:meth:`settle`), then counts a finish the body reported. A body
        that raises answers nothing and waits for nothing."""
        with self.lock:
            step = QueueStep(self, self.check_serving(), check_name(trainer, "trainer"))
            yield step
        self.settle(self.commits.latest() if step.ticket is None else step.ticket)
        if step.queue.reconciling:
            self.reconcile_wanted.set()
        if step.finished_records is not None:
            self.note_finished(step.finished_records)

    def persist(self, delta: Delta, with_meta: Sequence[Op] = ()) -> None:
        """:meth:`stage` and :meth:`settle` in one, for callers that keep the lock (rare
        events: a lost trainer, expired leases, a reconciliation)."""
        self.settle(self.stage(delta, with_meta))

    def _write(self, ops: list[Op]) -> None:
        """One group's transaction, retrying a store outage for ``persist_retry_s``."""
        self.persist_retry.call(lambda: self.snapshot.write(ops),
                                what=f"Master {self.node} of job {self.job}: persisting a "
                                     "change")

    def _depose(self, why: str) -> None:
        if not self.deposed.is_set():
            log.error("Master %s of job %s stops serving: %s.", self.node, self.job, why)
        self.deposed.set()

    def check_serving(self) -> TaskQueue:
        if self.deposed.is_set():
            raise NotLeaderError(f"master {self.node} of job {self.job} is no longer the leader")
        if self.queue is None:
            raise FailedPreconditionError(
                f"job {self.job} has no dataset yet: a trainer must call SetDataset first")
        return self.queue

    # ---------------------------------------------------------------------------- operations

    def set_dataset(self, url: str, chunks_per_task: int, num_passes: int,
                    plan: BatchPlan, stream: StreamSpec | None = None) -> TaskQueue:
        """Set the job's dataset (or stream) and pin its batch plan; a repeat with the same
        arguments is answered with the queue, any difference is refused naming it."""
        with self.lock:
            if self.deposed.is_set():
                raise NotLeaderError(f"master {self.node} of job {self.job} is not the leader")
            if self.dataset is not None and self.queue is not None:
                differs = self.dataset.differences(url, chunks_per_task, num_passes, plan,
                                                   stream)
                if differs:
                    raise FailedPreconditionError(
                        f"job {self.job} trains with {'; '.join(differs)}: this trainer would "
                        "number its batches differently or read other data, so the master "
                        "refuses it (every trainer of a job must use the same dataset, "
                        "chunks_per_task, num_passes, batch_size, shuffle_seed and features)")
                return self.queue
            if not url:
                raise FailedPreconditionError("SetDataset needs a dataset_url")
            if stream is not None and num_passes != 1:
                raise InvalidArgumentError(f"num_passes={num_passes}: a stream is trained "
                                           "once, in order (one pass)")
            source = self._source(url) if stream is not None else None
            chunks = () if stream is not None else tuple(self.chunk_lister(url))
            dataset = DatasetRecord(url, chunks_per_task, num_passes, chunks, plan, stream)
            queue = dataset.new_queue(self.policy)
            try:
                self.snapshot.write_dataset(dataset, queue)
            except NotLeaderError:
                self._depose("the dataset write was fenced off")
                raise
            self.dataset, self.queue = dataset, queue
            if stream is not None:
                self.catalog, self.source = StreamCatalog(plan.batch_size, stream.start), source
                log.info("Master %s of job %s follows the stream %s%s: partitions are "
                         "appended as they land.", self.node, self.job, url,
                         f" from {stream.start}" if stream.start else "")
            else:
                log.info("Master %s of job %s set dataset %s: %d chunks in %d tasks, %d "
                         "passes.", self.node, self.job, url, len(chunks), queue.num_tasks,
                         num_passes)
            return queue

    def stream_to_follow(self) -> tuple[PartitionSource, StreamCatalog] | None:
        """(source, catalogue) while the job follows an open stream, else None."""
        with self.lock:
            queue, catalog, source = self.queue, self.catalog, self.source
            if (self.deposed.is_set() or queue is None or catalog is None or source is None
                    or not queue.open or queue.failed_reason):
                return None
            return source, catalog

    def append_partitions(self, decision: FollowDecision) -> None:
        """Append the partitions a follow step took (and close the stream if it is complete),
        persisting them with the new position and the queue's meta in one fenced transaction
        before any of their tasks is handed out."""
        with self.lock:
            queue, catalog = self.check_serving(), self.catalog
            if catalog is None or not queue.open:
                return
            if decision.position.partitions != catalog.position.partitions + len(
                    decision.take):
                raise InvalidArgumentError(
                    f"a follow step from {catalog.position.partitions} partitions took "
                    f"{len(decision.take)} but says {decision.position.partitions}")
            first = catalog.position.partitions
            for partition in decision.take:
                ids, _ = queue.append([c.num_rows for c in partition.chunks])
                catalog.add(partition, ids, decision.position)
            delta = queue.close() if decision.complete else Delta()
            if not decision.take and delta.empty:
                return
            self.persist(delta, append_ops(first, decision.take, decision.position)
                         if decision.take else ())
            _log_appended(self, decision.take, decision.complete)

    def note_follow(self, **seen: Any) -> None:
        """What the follow loop saw last (``refused``, ``error``, ``listed_at``...), for the
        status page."""
        with self.lock:
            self.follow.update(seen)

    def trainer_seen(self, name: str) -> None:
        with self.lock:
            self.live_trainers.add(name)

    def known_trainers(self) -> set[str]:
        """Trainers seen live, and every holder of a pending task."""
        with self.lock:
            owners = self.queue.owners() if self.queue is not None else set()
            return self.live_trainers | owners

    def trainer_gone(self, name: str, *, graceful: bool) -> None:
        with self.lock:
            self.live_trainers.discard(name)
            if self.queue is None or self.deposed.is_set():
                return
            held = self.queue.pending_of(name)
            delta = self.queue.trainer_lost(name, self.clock(), count_failure=not graceful)
            if held:
                log.warning("Master %s of job %s: trainer %s %s; its tasks %s go back to todo.",
                            self.node, self.job, name,
                            "left" if graceful else "was lost", held)
            self.persist(delta)

    def expire_leases(self) -> None:
        with self.lock:
            if self.queue is None or self.deposed.is_set():
                return
            delta = self.queue.expire_leases(self.clock())
            if not delta.empty:
                log.warning("Master %s of job %s: task lease(s) expired for %s.",
                            self.node, self.job, sorted(delta.tasks))
            self.persist(delta)

    def reconcile_job(self) -> tuple[int, dict[int, int]] | None:
        """(pass, expected batches per task) while a pass waits for reconciliation."""
        with self.lock:
            queue = self.queue
            if queue is None or self.deposed.is_set() or not queue.reconciling:
                return None
            return queue.pass_id, queue.expected_batches()

    def apply_reconciliation(self, result: Reconciliation) -> bool:
        """Step the queue with the pservers' answer, persisting the accounting and the change
        before anything is handed out. False if the answer is stale."""
        with self.lock:
            queue = self.check_serving()
            delta = queue.reconciled(result.pass_id, result.missing, self.clock())
            if delta.empty:
                return False
            doc = result.as_dict()
            # The accounting goes with the meta record: the pass ends (or its recovery starts)
            # in the same transaction that records why, and a sealed pass is published for
            # pservers that restart with no checkpoint (they refuse its late pushes). An open
            # stream's pass goes on after its reconciliations: it is not sealed.
            records = [self.snapshot.accounting_op(result.pass_id, doc)]
            ended = queue.finished or queue.pass_id > result.pass_id
            if result.complete and ended:
                records.append(Put(SEALED_PASSES, SealedPasses(result.pass_id + 1).encode()))
            self.persist(delta, records)
            self.accounting[result.pass_id] = doc
            if result.complete and not ended:
                log.info("Master %s of job %s: every pserver shard holds all %d batches the "
                         "stream has trained so far; it goes on.", self.node, self.job,
                         sum(result.batches.values()))
            elif result.complete:
                log.info("Master %s of job %s: every pserver shard holds all %d batches of pass "
                         "%d; the pass is over.", self.node, self.job,
                         sum(result.batches.values()), result.pass_id)
            else:
                log.warning("Master %s of job %s: pserver shards miss batches of pass %d; "
                            "recovery dispatches of tasks %s recompute %d batches.", self.node,
                            self.job, result.pass_id, sorted(result.missing),
                            sum(len(s) for s in result.missing.values()))
            return True

    def note_finished(self, records: int) -> None:
        with self.lock:
            now = self.clock()
            self._finishes.append((now, records))
            while self._finishes and self._finishes[0][0] < now - THROUGHPUT_WINDOW_S:
                self._finishes.popleft()

    def throughput(self) -> float:
        now = self.clock()
        recent = sum(r for t, r in self._finishes if t >= now - THROUGHPUT_WINDOW_S)
        window = min(THROUGHPUT_WINDOW_S, max(now - self.started, 1e-3))
        return recent / window

    def stream_partitions(self) -> list[PartitionTasks]:
        """A stream's appended partitions, each with its task count and whether it is trained
        (progressive.py); empty for a fixed dataset."""
        with self.lock:
            if self.catalog is None or self.queue is None:
                return []
            trained = self.catalog.trained_through(self.queue)
            return [PartitionTasks(e.partition.name, e.partition.time, e.num_tasks, i < trained)
                    for i, e in enumerate(self.catalog.entries)]

    def status(self) -> dict[str, Any]:
        """The document served at ``/api/status`` and by the Status RPC."""
        with self.lock:
            queue = self.queue
            doc: dict[str, Any] = {
                "job": self.job,
                "master": self.node,
                "leader": not self.deposed.is_set(),
                "dataset": self.dataset.url if self.dataset else None,
                "live_trainers": sorted(self.live_trainers),
                "throughput_records_per_s": round(self.throughput(), 3),
            }
            if queue is None:
                doc.update(state="waiting_for_dataset", done=False, **{"pass": None})
                return doc
            counts = queue.counts()
            failed = queue.failed_reason
            doc.update({
                "state": "failed" if failed else ("succeeded" if queue.finished else "running"),
                "done": queue.finished or bool(failed),
                "pass": queue.pass_id,
                "num_passes": queue.num_passes,
                "num_tasks": queue.num_tasks,
                "num_chunks": queue.num_chunks,
                "records_per_pass": queue.records_per_pass,
                "running_share": round(queue.running_share(), 4),
                "chunks_per_task": queue.chunks_per_task,
                "counts": counts,
                "records_total": queue.records_total,
                "tasks_finished_total": queue.tasks_finished_total,
                "failures_total": queue.failures_total,
                "job_failed_reason": failed,
                "failed_tasks": [{"pass": e.pass_id, "task": e.task_id, "reason": e.reason}
                                 for e in queue.failed_tasks()],
                "failure_log": [{"pass": e.pass_id, "task": e.task_id, "reason": e.reason}
                                for e in queue.failure_log[-50:]],
                "pending": {t: queue.pending_of(t) for t in sorted(queue.owners())},
                "save_model_holder": queue.save_holder(self.clock()),
                "reconciling": queue.reconciling,
                "recovering": queue.recovering(),
                "recoveries_total": queue.recoveries_total,
                "accounting": [self.accounting[p] for p in sorted(self.accounting)[-5:]],
                "persist_ms_mean": round(1e3 * self.persist_seconds
                                         / max(self.persist_count, 1), 3),
            })
            if self.catalog is not None:
                doc["stream"] = {**self.catalog.status(queue, time.time()), **self.follow}
            return doc


def stream_of(request: master_pb2.SetDatasetRequest) -> StreamSpec | None:
    """The stream a SetDataset asks for, or None for a fixed dataset."""
    if not request.stream:
        if request.stream_from:
            raise InvalidArgumentError("stream_from is for a stream (stream=true)")
        return None
    if len(request.stream_from) > MAX_PARTITION_NAME:
        raise InvalidArgumentError(f"stream_from of {len(request.stream_from)} characters is "
                                   f"longer than a partition name ({MAX_PARTITION_NAME})")
    return StreamSpec(request.stream_from)


def plan_of(request: master_pb2.SetDatasetRequest) -> BatchPlan:
    """The batch plan a SetDataset asks for (INVALID_ARGUMENT without a batch size)."""
    if request.batch_size < 1:
        raise InvalidArgumentError(
            f"SetDataset needs batch_size >= 1 (got {request.batch_size}): the master counts "
            "each task's batches from it; this trainer's elasticps is older than the master's")
    seed = request.shuffle_seed if request.HasField("shuffle_seed") else None
    return BatchPlan(request.batch_size, seed, request.features)


class TaskChunks(Protocol):
    """Where a task message's chunks come from: a dataset's record or a stream's catalogue."""

    def chunk_slice(self, first: int, count: int) -> Sequence[ChunkRef]: ...

    def first_batch(self, chunk: int) -> int: ...

    @property
    def pass_batches(self) -> int: ...

    def partition_at(self, chunk: int) -> AppendedPartition | None: ...

    @property
    def schema_partition(self) -> str: ...


def task_message(view: TaskView, dataset: TaskChunks,
                 lease_seconds: float = 0.0) -> master_pb2.Task:
    chunks = dataset.chunk_slice(view.first_chunk, view.num_chunks)
    task = master_pb2.Task(
        task_id=view.task_id, pass_id=view.pass_id, epoch=view.epoch,
        chunks=[master_pb2.Chunk(path=c.path, row_group=c.row_group, num_rows=c.num_rows)
                for c in chunks],
        records_done=view.records_done, only_batches=list(view.only_batches),
        lease_seconds=lease_seconds, first_batch=dataset.first_batch(view.first_chunk),
        pass_batches=dataset.pass_batches)
    partition = dataset.partition_at(view.first_chunk)
    if partition is not None:
        task.partition = partition.name
        task.event_time = partition.time or 0.0
        task.schema_partition = dataset.schema_partition
    return task


def _log_appended(state: MasterState, taken: Sequence[AppendedPartition],
                  complete: bool) -> None:
    for partition in taken:
        log.info("Master %s of job %s appended partition %s of the stream: %d chunks, %d "
                 "rows.", state.node, state.job, partition.name, len(partition.chunks),
                 partition.rows)
    if complete:
        log.info("Master %s of job %s: the stream ended (its end marker is there) and every "
                 "partition is appended; the pass ends once they are trained.", state.node,
                 state.job)


def get_task_response(result: GetTaskResult, dataset: TaskChunks | None,
                      lease_seconds: float) -> master_pb2.GetTaskResponse:
    """The GetTask answer for ``result`` (the task's chunks from ``dataset``)."""
    response = master_pb2.GetTaskResponse(
        outcome=master_pb2.GetTaskResponse.Outcome.Value(result.outcome.name),
        pass_id=result.pass_id, reason=result.reason, retry_after_s=result.retry_after_s)
    if result.outcome is Outcome.TASK and result.task is not None:
        assert dataset is not None  # a queue exists only with its dataset
        response.task.CopyFrom(task_message(result.task, dataset, lease_seconds))
    return response


class MasterServicer(master_pb2_grpc.MasterServicer):
    """gRPC edge of :class:`MasterState`: validates, steps the queue, persists, answers."""

    def __init__(self, state: MasterState) -> None:
        self.state = state

    @rpc_handler
    def SetDataset(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.SetDatasetRequest, context: grpc.ServicerContext,
    ) -> master_pb2.SetDatasetResponse:
        queue = self.state.set_dataset(request.dataset_url, request.chunks_per_task,
                                       request.num_passes, plan_of(request),
                                       stream_of(request))
        return master_pb2.SetDatasetResponse(num_tasks=queue.num_tasks,
                                             num_chunks=queue.num_chunks)

    @rpc_handler
    def GetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.GetTaskRequest, context: grpc.ServicerContext,
    ) -> master_pb2.GetTaskResponse:
        with self.state.queue_step(request.trainer) as step:
            result, delta = step.queue.get_task(step.trainer, request.pass_id, step.now)
            step.stage(delta)
            response = step.task_response(result)
        return response

    @rpc_handler
    def ReportProgress(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.ReportProgressRequest, context: grpc.ServicerContext,
    ) -> master_pb2.ReportProgressResponse:
        with self.state.queue_step(request.trainer) as step:
            reply, delta = step.queue.report_progress(step.trainer, request.task_id,
                                                      request.epoch, request.records_done,
                                                      step.now)
            step.stage(delta)
        return master_pb2.ReportProgressResponse(still_owner=reply.accepted, reason=reply.reason)

    @rpc_handler
    def TaskFinished(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.TaskFinishedRequest, context: grpc.ServicerContext,
    ) -> master_pb2.TaskFinishedResponse:
        with self.state.queue_step(request.trainer) as step:
            reply, delta = step.queue.task_finished(step.trainer, request.task_id,
                                                    request.epoch, request.records, step.now,
                                                    batches=request.batches)
            step.stage(delta)
            step.count_finish(reply, request.records)
        return master_pb2.TaskFinishedResponse(accepted=reply.accepted, reason=reply.reason)

    @rpc_handler
    def FinishAndGetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.FinishAndGetTaskRequest, context: grpc.ServicerContext,
    ) -> master_pb2.FinishAndGetTaskResponse:
        """TaskFinished and GetTask in one step of the queue, so their writes are staged
        together and stored in one transaction (one group-commit wait, one round trip)."""
        finished = request.finished
        with self.state.queue_step(finished.trainer) as step:
            reply, result, delta = step.queue.finish_and_get(
                step.trainer, finished.task_id, finished.epoch, finished.records,
                request.pass_id, step.now, batches=finished.batches)
            step.stage(delta)
            step.count_finish(reply, finished.records)
            following = step.task_response(result)
        return master_pb2.FinishAndGetTaskResponse(
            finished=master_pb2.TaskFinishedResponse(accepted=reply.accepted,
                                                     reason=reply.reason),
            next=following)

    @rpc_handler
    def TaskFailed(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.TaskFailedRequest, context: grpc.ServicerContext,
    ) -> master_pb2.TaskFailedResponse:
        state = self.state
        with state.queue_step(request.trainer) as step:
            reason = clip_text(request.reason)
            reply, delta = step.queue.task_failed(step.trainer, request.task_id,
                                                  request.epoch, reason, step.now)
            step.stage(delta)
        if reply.accepted and not delta.empty:
            log.warning("Master %s of job %s: trainer %s failed task %d: %s.", state.node,
                        state.job, request.trainer, request.task_id, reason)
        return master_pb2.TaskFailedResponse(accepted=reply.accepted, reason=reply.reason)

    @rpc_handler
    def RequestSaveModel(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.RequestSaveModelRequest, context: grpc.ServicerContext,
    ) -> master_pb2.RequestSaveModelResponse:
        with self.state.queue_step(request.trainer) as step:
            reply, delta = step.queue.request_save_model(step.trainer, request.block_seconds,
                                                         step.now)
            step.stage(delta)
        return master_pb2.RequestSaveModelResponse(granted=reply.accepted, reason=reply.reason)

    @rpc_handler
    def Status(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.StatusRequest, context: grpc.ServicerContext,
    ) -> master_pb2.StatusResponse:
        return master_pb2.StatusResponse(json=json.dumps(self.state.status()))
