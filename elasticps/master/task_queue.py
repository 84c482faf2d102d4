"""The master's task queue: a pure state machine (no I/O, no clock; time is an argument).

A dataset's chunks are grouped into tasks of ``chunks_per_task`` consecutive chunks. Every
task is in exactly one state per pass::

              get_task                 task_finished
      TODO ─────────────▶ PENDING ─────────────────────▶ DONE
       ▲                     │
       │  failure < max      │ lease expired / trainer lost / task_failed
       └─────────────────────┤
                             │ failure == max_failures
                             ▼
                           FAILED

A pass ends when no task is TODO or PENDING. Then, unless it was the last pass, the next pass
starts with EVERY task back in TODO and its failure count reset: a FAILED task gets a fresh
chance each pass (a transient fault should not drop data for the rest of the job), and the
failures of the pass stay in :attr:`TaskQueue.failure_log`. The job fails for good (every
GetTask answers JOB_FAILED with the reason) as soon as more than ``max_failed_fraction`` of the
tasks, or all of them, are FAILED in one pass.

Every dispatch increments the task's ``epoch``; a report carrying an older epoch comes from a
stale holder and is refused with a reason (never an exception). A finish from the latest holder
is accepted as long as the task has not been dispatched again, even after its lease expired:
finished work is worth keeping.

**Reconciliation** (``QueuePolicy.reconcile``; docs/fault-tolerance.md): when no task of a pass
is TODO or PENDING the pass does not end yet; the queue is ``reconciling`` and GetTask answers
RETRY_LATER. The service asks every pserver shard to checkpoint and report which batches of the
pass that checkpoint holds, compares them with :meth:`TaskQueue.expected_batches` (each DONE
task's batches ``0..n-1``, ``n`` counted from its chunks' row counts and the job's batch size:
never from what a trainer or a shard reports) and feeds the batches some
shard misses back through :meth:`TaskQueue.reconciled`: each such task becomes a TODO
*recovery dispatch* with ``only_batches`` = the missing seqs (union over shards). Recovery
dispatches are leased, renewed, failed and finished like any task (a recovery finish adds no
records to the job's progress and keeps the task's batch count); when none is left the queue
reconciles again. An empty answer (every shard holds every batch) ends the pass. Recovery is
bounded: when more than ``max_stalled_recoveries`` reconciliations in a row find exactly the
same batches missing, the job fails with a reason naming them instead of going round for ever.

**A stream** (``stream=True``; docs/data.md) is one pass over a dataset that grows: the queue
starts with no tasks and :meth:`TaskQueue.append` adds each partition's chunks as new TODO tasks
(grouped within the partition, so a task never spans two). While the stream is *open* its pass
cannot end: with nothing TODO or PENDING, GetTask answers RETRY_LATER ("waiting for the stream's
next partition"), and, when tasks finished since the last reconciliation, the queue reconciles
what is DONE so far (missing batches become recovery dispatches; an empty answer only records
that all is held). :meth:`TaskQueue.close` (the end marker seen and every partition appended)
lets the pass end as a fixed dataset's does: a last reconciliation, then ``finished``.

Each transition returns a :class:`Delta` naming the task records and whether the meta record
changed, so the service persists only what changed (see :mod:`elasticps.master.snapshot`).
Pass starts change only the meta record: a task record from an earlier pass reads as TODO, and
so does a task appended to a stream that was never dispatched.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from elasticps.data.batch_plan import batches_in_chunks
from elasticps.errors import InvalidArgumentError, NotFoundError

MAX_TRAINER_NAME = 253
MAX_REASON = 1000
MAX_SAVE_SECONDS = 24 * 3600.0
FAILURE_LOG_LIMIT = 1000
# How soon a trainer asks again while a pass end is being reconciled: the pservers' checkpoints
# take a moment, and its own backoff (doubling to 1 s) would see the end late.
RECONCILING_RETRY_S = 0.05


class TaskState(enum.Enum):
    TODO = "todo"
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class Outcome(enum.IntEnum):
    """GetTask answers; the values are ``master_pb2.GetTaskResponse.Outcome``'s."""

    TASK = 1  # a task to work on
    RETRY_LATER = 2  # nothing to hand out now: other trainers hold the rest of the pass
    PASS_OVER = 3  # the asked pass has ended; move on to the current one
    ALL_DONE = 4  # every pass is done
    JOB_FAILED = 5  # too many tasks failed; the reason says which


@dataclass(frozen=True)
class QueuePolicy:
    """Failure and lease policy of a queue."""

    max_failures: int = 3  # failed attempts after which a task is FAILED for the pass
    task_lease: float = 30.0  # seconds a pending task lives without a progress report
    max_failed_fraction: float = 0.1  # more FAILED tasks than this in a pass fail the job
    reconcile: bool = False  # a pass ends only once the pservers hold all of its batches
    # Reconciliations in a row that may find exactly the same batches missing before the job
    # fails: recovery that changes nothing would otherwise go round for ever.
    max_stalled_recoveries: int = 3

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise InvalidArgumentError(f"max_failures={self.max_failures} must be >= 1")
        if self.max_stalled_recoveries < 1:
            raise InvalidArgumentError(
                f"max_stalled_recoveries={self.max_stalled_recoveries} must be >= 1")
        if not self.task_lease > 0:
            raise InvalidArgumentError(f"task_lease={self.task_lease} must be > 0 seconds")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise InvalidArgumentError(
                f"max_failed_fraction={self.max_failed_fraction} must be within [0, 1]")


@dataclass(frozen=True)
class Delta:
    """What a transition changed: task ids whose record changed, the meta record, log entries."""

    tasks: frozenset[int] = frozenset()
    meta: bool = False
    failures: tuple[FailureEntry, ...] = ()

    def __or__(self, other: Delta) -> Delta:
        return Delta(self.tasks | other.tasks, self.meta or other.meta,
                     self.failures + other.failures)

    @property
    def empty(self) -> bool:
        return not self.tasks and not self.meta and not self.failures


NO_CHANGE = Delta()


@dataclass(frozen=True)
class FailureEntry:
    """A task that went FAILED in a pass, and the reason of its last failure."""

    pass_id: int
    task_id: int
    reason: str


@dataclass(frozen=True)
class TaskView:
    """A dispatched task as the trainer sees it."""

    task_id: int
    pass_id: int
    epoch: int
    first_chunk: int
    num_chunks: int
    num_records: int
    records_done: int
    only_batches: tuple[int, ...] = ()


@dataclass(frozen=True)
class GetTaskResult:
    outcome: Outcome
    pass_id: int
    task: TaskView | None = None
    reason: str = ""
    retry_after_s: float = 0.0  # RETRY_LATER: when to ask again (0: the trainer's backoff)


@dataclass(frozen=True)
class Reply:
    """Answer to a report: ``accepted`` False means the caller is not (or no longer) the holder.

    ``done_now`` is True only on the answer to the call that moved a task to DONE: a repeat of
    an accepted finish, a refused (stale) one and every other report leave it False, so the
    service counts a task's finished records once."""

    accepted: bool
    reason: str = ""
    done_now: bool = False


@dataclass(frozen=True)
class TaskRecord:
    """The persisted part of a task (its chunks follow from its id and the dataset)."""

    state: TaskState
    pass_id: int  # pass of its latest dispatch; -1 = never dispatched
    epoch: int
    owner: str
    records_done: int
    failures: int
    last_error: str = ""
    only_batches: tuple[int, ...] = ()


@dataclass(frozen=True)
class SaveGrant:
    holder: str
    seconds: float


@dataclass(frozen=True)
class MetaRecord:
    """The persisted job-wide state."""

    pass_id: int = 0
    finished: bool = False
    failed_reason: str = ""
    records_total: int = 0
    tasks_finished_total: int = 0
    failures_total: int = 0
    save: SaveGrant | None = None
    reconciling: bool = False
    recoveries_total: int = 0
    open: bool = False  # a stream that may still grow: its pass cannot end


@dataclass
class _Task:
    task_id: int
    first_chunk: int
    num_chunks: int
    num_records: int
    num_batches: int  # from the chunks' row counts and the batch size: the data's truth
    state: TaskState = TaskState.TODO
    pass_id: int = -1
    epoch: int = 0
    owner: str = ""
    records_done: int = 0
    failures: int = 0
    last_error: str = ""
    only_batches: tuple[int, ...] = ()
    deadline: float = 0.0  # lease deadline while PENDING; never persisted


@dataclass
class _Counts:
    by_state: dict[TaskState, int] = field(default_factory=dict)

    def move(self, old: TaskState, new: TaskState) -> None:
        self.by_state[old] -= 1
        self.by_state[new] += 1


def _check_trainer(trainer: str) -> None:
    if not trainer or len(trainer) > MAX_TRAINER_NAME:
        raise InvalidArgumentError(
            f"trainer name {trainer!r} must be 1 to {MAX_TRAINER_NAME} characters")


class TaskQueue:
    """Tasks of one dataset over ``num_passes`` passes, read ``batch_size`` rows at a time (a
    chunk of ``r`` rows is ``ceil(r / batch_size)`` batches); with ``stream=True``, one pass
    over chunks appended as they come. See the module docstring."""

    def __init__(self, chunk_rows: Sequence[int], chunks_per_task: int, num_passes: int,
                 policy: QueuePolicy | None = None, *, batch_size: int,
                 stream: bool = False) -> None:
        if batch_size < 1:
            raise InvalidArgumentError(f"batch_size={batch_size} must be >= 1")
        if chunks_per_task < 1:
            raise InvalidArgumentError(f"chunks_per_task={chunks_per_task} must be >= 1")
        if num_passes < 1:
            raise InvalidArgumentError(f"num_passes={num_passes} must be >= 1")
        if stream and num_passes != 1:
            raise InvalidArgumentError(f"num_passes={num_passes}: a stream is trained once, in "
                                       "order (one pass)")
        if not chunk_rows and not stream:
            raise InvalidArgumentError("the dataset has no chunks; there is nothing to train on")
        self.policy = policy or QueuePolicy()
        self.chunks_per_task = chunks_per_task
        self.num_passes = num_passes
        self.num_chunks = 0
        self.batch_size = batch_size
        self._tasks: list[_Task] = []
        self._records_per_pass = 0
        self._todo: OrderedDict[int, None] = OrderedDict()
        self._pending: dict[int, _Task] = {}
        self._counts = _Counts({s: 0 for s in TaskState})
        self._add_tasks(chunk_rows)
        self.open = stream  # a stream that may still grow (append); its pass cannot end
        # A stream: some task finished since the last reconciliation (in memory: a new leader
        # reconciles once when the queue next runs dry).
        self._unreconciled = stream
        self.pass_id = 0
        self.finished = False
        self.failed_reason = ""
        self.records_total = 0
        self.tasks_finished_total = 0
        self.failures_total = 0
        self.failure_log: list[FailureEntry] = []
        self.reconciling = False
        self.recoveries_total = 0
        # The batches the last reconciliation found missing, and how many in a row found
        # exactly those (in memory: a new leader starts counting again).
        self._last_missing: dict[int, tuple[int, ...]] = {}
        self._stalled = 0
        self._save: SaveGrant | None = None
        self._save_until = 0.0

    def _add_tasks(self, chunk_rows: Sequence[int]) -> list[int]:
        """New TODO tasks over ``chunk_rows`` (chunks numbered from :attr:`num_chunks` on),
        ``chunks_per_task`` at a time; their ids."""
        for index, count in enumerate(chunk_rows):
            if count < 0:
                raise InvalidArgumentError(
                    f"chunk {self.num_chunks + index} has a negative row count {count}")
        added = []
        for first in range(0, len(chunk_rows), self.chunks_per_task):
            group = chunk_rows[first:first + self.chunks_per_task]
            task = _Task(len(self._tasks), self.num_chunks + first, len(group), int(sum(group)),
                         batches_in_chunks(group, self.batch_size))
            self._tasks.append(task)
            self._todo[task.task_id] = None
            self._records_per_pass += task.num_records
            added.append(task.task_id)
        self.num_chunks += len(chunk_rows)
        self._counts.by_state[TaskState.TODO] += len(added)
        return added

    # ----------------------------------------------------------------------------- queries

    @property
    def num_tasks(self) -> int:
        return len(self._tasks)

    def counts(self) -> dict[str, int]:
        """Tasks per state in the current pass."""
        return {state.value: self._counts.by_state[state] for state in TaskState}

    @property
    def records_per_pass(self) -> int:
        return self._records_per_pass

    def running_share(self) -> float:
        """How much of the pending tasks is done, in tasks (two tasks half done: 1.0), from the
        records their trainers last reported: the progress inside the tasks being trained."""
        return sum(t.records_done / t.num_records for t in self._pending.values()
                   if t.num_records > 0)

    def task_view(self, task_id: int) -> TaskView:
        task = self._task(task_id)
        return TaskView(task.task_id, task.pass_id, task.epoch, task.first_chunk, task.num_chunks,
                        task.num_records, task.records_done, task.only_batches)

    def state_of(self, task_id: int) -> TaskState:
        return self._task(task_id).state

    def pending_of(self, trainer: str) -> list[int]:
        return sorted(t.task_id for t in self._pending.values() if t.owner == trainer)

    def owners(self) -> set[str]:
        return {t.owner for t in self._pending.values()}

    def failed_tasks(self) -> list[FailureEntry]:
        """FAILED tasks of the current pass with the reason of their last failure."""
        return [FailureEntry(self.pass_id, t.task_id, t.last_error)
                for t in self._tasks if t.state is TaskState.FAILED]

    def expected_batches(self) -> dict[int, int]:
        """``{task_id: batches}`` of the DONE tasks of the current pass: every shard must hold
        batches ``0..batches-1`` of each before the pass ends. The counts come from the data
        (row counts and batch size), so a tail that every trainer and shard lost is still
        expected."""
        return {t.task_id: t.num_batches for t in self._tasks if t.state is TaskState.DONE}

    def num_batches(self, task_id: int) -> int:
        """The batch count of a task, from its chunks' row counts and the batch size."""
        return self._task(task_id).num_batches

    def recovering(self) -> list[int]:
        """Tasks of the current pass that are recovery dispatches not yet finished."""
        return [t.task_id for t in self._tasks
                if t.only_batches and t.state in (TaskState.TODO, TaskState.PENDING)]

    def next_deadline(self) -> float | None:
        """The earliest lease deadline of a pending task (for the service's timer)."""
        return min((t.deadline for t in self._pending.values()), default=None)

    def save_holder(self, now: float) -> str | None:
        if self._save is not None and now < self._save_until:
            return self._save.holder
        return None

    # --------------------------------------------------------------------------- transitions

    def get_task(self, trainer: str, pass_id: int, now: float) -> tuple[GetTaskResult, Delta]:
        """Lease the next TODO task of ``pass_id`` to ``trainer``.

        A trainer works on one task at a time, so one that asks while it holds a task of this
        pass never received the answer that gave it (a lost reply, retried): it gets that task
        again, same epoch, its lease renewed, rather than a second one while the first sits
        leased to it until the task lease runs out."""
        _check_trainer(trainer)
        if pass_id < 0:
            raise InvalidArgumentError(f"pass_id={pass_id} must be >= 0")
        if self.failed_reason:
            return GetTaskResult(Outcome.JOB_FAILED, self.pass_id, reason=self.failed_reason), \
                NO_CHANGE
        if self.finished:
            return GetTaskResult(Outcome.ALL_DONE, self.num_passes,
                                 reason=f"all {self.num_passes} passes are done"), NO_CHANGE
        if pass_id < self.pass_id:
            return GetTaskResult(Outcome.PASS_OVER, self.pass_id,
                                 reason=f"pass {pass_id} is over; pass {self.pass_id} is "
                                        "running"), NO_CHANGE
        if pass_id > self.pass_id:
            raise InvalidArgumentError(
                f"pass_id={pass_id} has not started; the current pass is {self.pass_id}")
        held = self.pending_of(trainer)
        if held:
            task = self._tasks[held[0]]
            task.deadline = now + self.policy.task_lease  # a lease renewal is not persisted
            return GetTaskResult(Outcome.TASK, self.pass_id, self.task_view(task.task_id)), \
                NO_CHANGE
        if self.reconciling:
            return GetTaskResult(Outcome.RETRY_LATER, self.pass_id,
                                 reason=f"pass {self.pass_id} is being reconciled with the "
                                        "pservers",
                                 retry_after_s=RECONCILING_RETRY_S), NO_CHANGE
        if not self._todo:
            held_by_others = (f"{len(self._pending)} task(s) of pass {self.pass_id} are still "
                              "held by other trainers")
            return GetTaskResult(Outcome.RETRY_LATER, self.pass_id,
                                 reason=held_by_others if self._pending or not self.open
                                 else "waiting for the stream's next partition"), NO_CHANGE
        task_id, _ = self._todo.popitem(last=False)
        task = self._tasks[task_id]
        self._set_state(task, TaskState.PENDING)
        task.pass_id = self.pass_id
        task.epoch += 1
        task.owner = trainer
        task.deadline = now + self.policy.task_lease
        self._pending[task_id] = task
        return GetTaskResult(Outcome.TASK, self.pass_id, self.task_view(task_id)), \
            Delta(frozenset([task_id]))

    def report_progress(self, trainer: str, task_id: int, epoch: int, records_done: int,
                        now: float) -> tuple[Reply, Delta]:
        """Renew a pending task's lease; remember how many records are done (resume point)."""
        task = self._checked(trainer, task_id)
        if not 0 <= records_done <= task.num_records:
            raise InvalidArgumentError(
                f"records_done={records_done} for task {task_id} must be within "
                f"[0, {task.num_records}]")
        refusal = self._refusal(task, trainer, epoch)
        if refusal:
            return Reply(False, refusal), NO_CHANGE
        if task.state is not TaskState.PENDING:
            return Reply(False, f"task {task_id} is {task.state.value}, no longer leased to "
                                f"{trainer}"), NO_CHANGE
        task.deadline = now + self.policy.task_lease
        if records_done <= task.records_done:
            return Reply(True), NO_CHANGE  # a lease renewal is not persisted
        task.records_done = records_done
        return Reply(True), Delta(frozenset([task_id]))

    def task_finished(self, trainer: str, task_id: int, epoch: int, records: int,
                      now: float, batches: int = 0) -> tuple[Reply, Delta]:
        """Mark a task DONE. A repeat of an accepted finish is accepted again and changes
        nothing (the client may retry after a lost answer). ``batches`` (what the trainer
        counted) is only checked: the queue knows the task's batch count from the data, and a
        trainer that saw more batches than that numbers them differently from the job."""
        task = self._checked(trainer, task_id)
        if records < 0:
            raise InvalidArgumentError(f"records={records} must be >= 0")
        if not 0 <= batches <= task.num_batches:
            raise InvalidArgumentError(
                f"batches={batches} for task {task_id} must be within [0, {task.num_batches}]: "
                f"the task's chunks make {task.num_batches} batches of {self.batch_size} rows")
        refusal = self._refusal(task, trainer, epoch)
        if refusal:
            return Reply(False, refusal), NO_CHANGE
        if task.state is TaskState.DONE:
            return Reply(True, f"task {task_id} was already finished"), NO_CHANGE
        self._leave(task)
        self._set_state(task, TaskState.DONE)
        self._unreconciled = True
        task.records_done = task.num_records
        if not task.only_batches:
            self.records_total += task.num_records  # progress; `records` may be a resume
            self.tasks_finished_total += 1
        delta = Delta(frozenset([task_id]), meta=True)
        return Reply(True, done_now=True), delta | self._maybe_end_pass()

    def finish_and_get(self, trainer: str, task_id: int, epoch: int, records: int,
                       pass_id: int, now: float,
                       batches: int = 0) -> tuple[Reply, GetTaskResult, Delta]:
        """:meth:`task_finished`, then :meth:`get_task` of ``pass_id`` for the same trainer, as
        one transition whose delta the service persists in one transaction.

        Each half keeps its own retry rule, so a repeat after a lost answer is safe: the finish
        is accepted again and changes nothing, and the trainer, holding the task the first call
        assigned, gets that task again (same epoch). Every argument is checked before anything
        changes: bad input leaves the queue as it was."""
        _check_trainer(trainer)
        if not 0 <= pass_id <= self.pass_id:
            raise InvalidArgumentError(
                f"pass_id={pass_id} must be within [0, {self.pass_id}] (the current pass)")
        reply, finished = self.task_finished(trainer, task_id, epoch, records, now,
                                             batches=batches)
        # A finish only moves the pass forward, so get_task's own checks cannot fail here.
        result, got = self.get_task(trainer, pass_id, now)
        return reply, result, finished | got

    def task_failed(self, trainer: str, task_id: int, epoch: int, reason: str,
                    now: float) -> tuple[Reply, Delta]:
        """The holder gave up on a task (e.g. unreadable data); counts as one failure."""
        task = self._checked(trainer, task_id)
        reason = (reason or "no reason given")[:MAX_REASON]
        refusal = self._refusal(task, trainer, epoch)
        if refusal:
            return Reply(False, refusal), NO_CHANGE
        if task.state is TaskState.DONE:
            return Reply(False, f"task {task_id} is already finished"), NO_CHANGE
        if task.state is not TaskState.PENDING:
            # Already back in todo (or failed) for this epoch: a repeat, nothing more to count.
            return Reply(True, f"task {task_id} was already released"), NO_CHANGE
        delta = self._fail(task, f"trainer {trainer} reported: {reason}")
        return Reply(True), delta | self._maybe_end_pass()

    def expire_leases(self, now: float) -> Delta:
        """Send every pending task whose lease ran out back to TODO (one failure each)."""
        delta = NO_CHANGE
        for task in [t for t in self._pending.values() if t.deadline <= now]:
            delta = delta | self._fail(
                task, f"lease expired: trainer {task.owner} sent no progress for "
                      f"{self.policy.task_lease:g}s")
        return delta if delta.empty else delta | self._maybe_end_pass()

    def trainer_lost(self, trainer: str, now: float, *, count_failure: bool = True) -> Delta:
        """Every pending task of ``trainer`` goes back to TODO at once.

        ``count_failure=False`` is for a trainer that left on purpose and handed its work back.
        """
        delta = NO_CHANGE
        for task in [t for t in self._pending.values() if t.owner == trainer]:
            if count_failure:
                delta = delta | self._fail(task, f"trainer {trainer} was lost "
                                                 "(its store lease vanished)")
            else:
                self._leave(task)
                self._set_state(task, TaskState.TODO)
                self._todo[task.task_id] = None
                delta = delta | Delta(frozenset([task.task_id]))
        return delta if delta.empty else delta | self._maybe_end_pass()

    def request_save_model(self, trainer: str, block_seconds: float,
                           now: float) -> tuple[Reply, Delta]:
        """Grant ``trainer`` the right to save the model for ``block_seconds``; one at a time."""
        _check_trainer(trainer)
        if not 0 < block_seconds <= MAX_SAVE_SECONDS:
            raise InvalidArgumentError(
                f"block_seconds={block_seconds} must be within (0, {MAX_SAVE_SECONDS:g}]")
        holder = self.save_holder(now)
        if holder is not None and holder != trainer:
            return Reply(False, f"trainer {holder} is saving the model for another "
                                f"{self._save_until - now:.1f}s"), NO_CHANGE
        self._save = SaveGrant(trainer, float(block_seconds))
        self._save_until = now + block_seconds
        return Reply(True), Delta(meta=True)

    def append(self, chunk_rows: Sequence[int]) -> tuple[list[int], Delta]:
        """A stream's next partition: its chunks (row counts) become TODO tasks of the pass,
        after every task there is. The ids of the new tasks; the delta is empty (a task never
        dispatched has no record: it reads as TODO), so the caller persists what it appended
        (the partition) in the transaction it writes with it."""
        if not self.open:
            raise InvalidArgumentError("the queue is not an open stream: nothing can be "
                                       "appended to it")
        if self.failed_reason:
            raise InvalidArgumentError(f"the job failed ({self.failed_reason}); nothing more "
                                       "is appended")
        return self._add_tasks(chunk_rows), NO_CHANGE

    def close(self) -> Delta:
        """The stream ended and all of it is appended: its pass may now end (after the last
        reconciliation) once every task is done. Closing a closed queue changes nothing."""
        if not self.open:
            return NO_CHANGE
        self.open = False
        return Delta(meta=True) | self._maybe_end_pass()

    def reconciled(self, pass_id: int, missing: Mapping[int, Iterable[int]],
                   now: float) -> Delta:
        """The pservers' answer to a reconciliation of ``pass_id``: the batch seqs some shard
        misses, per task. Empty: the pass ends. Otherwise each named task becomes a TODO
        recovery dispatch of just those seqs. A stale answer (another pass, or no
        reconciliation pending) changes nothing."""
        if not self.reconciling or pass_id != self.pass_id or self.failed_reason:
            return NO_CHANGE
        if self._pending or (self._todo and not self.open):
            # Recovery work is still out (a reconciling flag read back with it, see restore):
            # the pass ends only after it is done and a later reconciliation finds nothing.
            # (An open stream's TODO tasks are partitions appended meanwhile: the answer,
            # about DONE tasks only, still holds.)
            self.reconciling = False
            return Delta(meta=True)
        checked: dict[int, tuple[int, ...]] = {}
        for task_id, seqs in missing.items():
            task = self._task(task_id)
            wanted = tuple(sorted({int(s) for s in seqs}))
            if task.state is not TaskState.DONE:
                raise InvalidArgumentError(
                    f"task {task_id} is {task.state.value}, not done; it cannot be recovered")
            if not wanted:
                continue
            if wanted[0] < 0 or wanted[-1] >= task.num_batches:
                raise InvalidArgumentError(
                    f"task {task_id}: batch seqs {list(wanted)} must be within "
                    f"[0, {task.num_batches})")
            checked[task_id] = wanted
        self.reconciling = False
        if not checked:
            if self.open:  # every shard holds what is done so far; the stream goes on
                self._unreconciled = False
                self._last_missing, self._stalled = {}, 0
                return Delta(meta=True)
            return Delta(meta=True) | self._end_pass()
        self._stalled = self._stalled + 1 if checked == self._last_missing else 1
        self._last_missing = checked
        if self._stalled > self.policy.max_stalled_recoveries:
            shown = "; ".join(f"task {t}: seqs {list(seqs)[:10]}"
                              for t, seqs in list(checked.items())[:5])
            self.failed_reason = (
                f"pass {pass_id} cannot be reconciled: {self._stalled} reconciliations in a "
                f"row found the same {sum(map(len, checked.values()))} batch(es) missing "
                f"after recovering them ({shown}); some shard refuses them every time, see "
                "the pservers' logs")
            return Delta(meta=True)
        for task_id, wanted in checked.items():
            task = self._tasks[task_id]
            self._set_state(task, TaskState.TODO)
            task.only_batches = wanted
            task.owner = ""
            task.records_done = 0
            task.failures = 0
            task.last_error = ""
            self._todo[task_id] = None
        self.recoveries_total += len(checked)
        return Delta(frozenset(checked), meta=True)

    # --------------------------------------------------------------------------- persistence

    def task_record(self, task_id: int) -> TaskRecord:
        t = self._task(task_id)
        return TaskRecord(t.state, t.pass_id, t.epoch, t.owner, t.records_done, t.failures,
                          t.last_error, t.only_batches)

    def meta_record(self) -> MetaRecord:
        return MetaRecord(self.pass_id, self.finished, self.failed_reason, self.records_total,
                          self.tasks_finished_total, self.failures_total, self._save,
                          self.reconciling, self.recoveries_total, self.open)

    @classmethod
    def restore(cls, chunk_rows: Sequence[int], chunks_per_task: int, num_passes: int,
                policy: QueuePolicy | None, meta: MetaRecord, records: dict[int, TaskRecord],
                failure_log: Iterable[FailureEntry], live_trainers: set[str],
                now: float, *, batch_size: int,
                stream: TaskQueue | None = None) -> tuple[TaskQueue, Delta]:
        """Rebuild a queue from its persisted records.

        ``stream``: a fresh stream queue with its partitions appended again, in order (the
        queue restored; ``chunk_rows`` is then ignored). A record of an earlier pass reads as
        TODO. Pending tasks get a fresh lease (the old deadline was another process's clock);
        those whose owner is not in ``live_trainers`` go back to TODO as a failure, which the
        returned delta carries.
        """
        queue = stream or cls(chunk_rows, chunks_per_task, num_passes, policy,
                              batch_size=batch_size)
        queue.open = queue.open and meta.open
        queue.pass_id = meta.pass_id
        queue.finished = meta.finished
        queue.failed_reason = meta.failed_reason
        queue.records_total = meta.records_total
        queue.tasks_finished_total = meta.tasks_finished_total
        queue.failures_total = meta.failures_total
        queue.reconciling = meta.reconciling
        queue.recoveries_total = meta.recoveries_total
        queue.failure_log = list(failure_log)[-FAILURE_LOG_LIMIT:]
        if meta.save is not None:
            queue._save = meta.save
            queue._save_until = now + meta.save.seconds  # conservative: never shorter
        for task_id, rec in records.items():
            if not 0 <= task_id < queue.num_tasks:
                raise InvalidArgumentError(
                    f"snapshot has task {task_id} but the dataset has {queue.num_tasks} tasks")
            task = queue._tasks[task_id]
            task.epoch = rec.epoch
            task.pass_id = rec.pass_id
            if rec.pass_id != meta.pass_id:
                continue  # an earlier pass: TODO with a clean slate
            task.only_batches = rec.only_batches
            task.owner = rec.owner
            task.records_done = rec.records_done
            task.failures = rec.failures
            task.last_error = rec.last_error
            if rec.state is not TaskState.TODO:
                del queue._todo[task_id]
                queue._set_state(task, rec.state)
            if rec.state is TaskState.PENDING:
                task.deadline = now + queue.policy.task_lease
                queue._pending[task_id] = task
        if not queue.finished and not queue.failed_reason:
            # A todo order that survives restarts: tasks sent back (failures > 0) go last.
            order = sorted(queue._todo, key=lambda i: (queue._tasks[i].failures > 0, i))
            queue._todo = OrderedDict((i, None) for i in order)
        delta = NO_CHANGE
        if queue.reconciling and (queue._todo or queue._pending):
            # A delta bigger than one store transaction was cut after some recovery dispatches
            # were written but before the meta that ends the reconciliation: the pass has work
            # left, so it is not reconciling (the missing rest is found again at its end).
            queue.reconciling = False
            delta = Delta(meta=True)
        for trainer in sorted(queue.owners() - live_trainers):
            delta = delta | queue.trainer_lost(trainer, now)
        return queue, delta | queue._maybe_end_pass()

    # ------------------------------------------------------------------------------ helpers

    def _task(self, task_id: int) -> _Task:
        if not 0 <= task_id < len(self._tasks):
            raise NotFoundError(
                f"task {task_id} does not exist; the dataset has {len(self._tasks)} tasks")
        return self._tasks[task_id]

    def _checked(self, trainer: str, task_id: int) -> _Task:
        _check_trainer(trainer)
        return self._task(task_id)

    def _refusal(self, task: _Task, trainer: str, epoch: int) -> str:
        """Why a report about ``task`` from (trainer, epoch) is stale, or '' if it is current."""
        if self.failed_reason:
            return f"the job failed: {self.failed_reason}"
        if epoch != task.epoch or task.pass_id != self.pass_id or self.finished:
            return (f"task {task.task_id} epoch {epoch} is stale: the task was dispatched again "
                    f"(epoch {task.epoch}, pass {task.pass_id}; current pass {self.pass_id})")
        if task.owner != trainer:
            return f"task {task.task_id} epoch {epoch} is held by {task.owner}, not {trainer}"
        return ""

    def _set_state(self, task: _Task, state: TaskState) -> None:
        self._counts.move(task.state, state)
        task.state = state

    def _leave(self, task: _Task) -> None:
        """Take ``task`` out of the todo/pending indexes (before a state change)."""
        self._pending.pop(task.task_id, None)
        self._todo.pop(task.task_id, None)

    def _fail(self, task: _Task, reason: str) -> Delta:
        self._leave(task)
        task.failures += 1
        task.last_error = reason[:MAX_REASON]
        self.failures_total += 1
        if task.failures < self.policy.max_failures:
            self._set_state(task, TaskState.TODO)
            self._todo[task.task_id] = None  # retried after the tasks nobody tried yet
            return Delta(frozenset([task.task_id]), meta=True)
        self._set_state(task, TaskState.FAILED)
        entry = FailureEntry(self.pass_id, task.task_id, task.last_error)
        self.failure_log = [*self.failure_log[-(FAILURE_LOG_LIMIT - 1):], entry]
        failed = self._counts.by_state[TaskState.FAILED]
        if failed == self.num_tasks or failed > self.policy.max_failed_fraction * self.num_tasks:
            self.failed_reason = (
                f"{failed} of {self.num_tasks} tasks failed in pass {self.pass_id}, more than "
                f"the allowed fraction {self.policy.max_failed_fraction:g}; the last was task "
                f"{task.task_id} after {task.failures} failures: {task.last_error}")
        return Delta(frozenset([task.task_id]), meta=True, failures=(entry,))

    def _maybe_end_pass(self) -> Delta:
        if (self._todo or self._pending or self.failed_reason or self.finished
                or self.reconciling):
            return NO_CHANGE
        if self.open:  # a stream waits for its next partition; what is done may be checked
            if self.policy.reconcile and self._unreconciled:
                self.reconciling = True
                return Delta(meta=True)
            return NO_CHANGE
        if self.policy.reconcile:
            self.reconciling = True  # the service asks the pservers; see reconciled()
            return Delta(meta=True)
        return self._end_pass()

    def _end_pass(self) -> Delta:
        self._last_missing, self._stalled = {}, 0
        if self.pass_id + 1 >= self.num_passes:
            self.finished = True
            return Delta(meta=True)
        self.pass_id += 1
        # Every task, FAILED ones included, starts the new pass as TODO with a clean slate.
        # Only the meta record is written: task records of an earlier pass read as TODO.
        for task in self._tasks:
            task.state = TaskState.TODO
            task.owner = ""
            task.records_done = 0
            task.failures = 0
            task.last_error = ""
            task.only_batches = ()
        self._todo = OrderedDict((t.task_id, None) for t in self._tasks)
        self._counts = _Counts({s: 0 for s in TaskState})
        self._counts.by_state[TaskState.TODO] = len(self._tasks)
        return Delta(meta=True)
