"""The faults themselves: one step at a time, a gap, then a kill or a scale step, measured.

:class:`ChaosLoop` waits until training is under way and then, step by step, sleeps a seeded gap
and either scales the trainers or SIGKILLs one process of a seeded role, found through the job's
store records (:mod:`elasticps.chaos.targets`). After each kill it measures

- **serving again**: master: a new leader published its address and its status API answers;
  pserver: the slot was claimed by a new process; trainer: a new trainer registered;
- **throughput back**: training progressed past where it was at the kill (job_watch.py's
  progress marks: the master's finished tasks plus recovery dispatches, or some trainer's
  published batches), or the master says the job is done,

and waits for both (or ``recovery_timeout``; both polled together, each timed from the kill)
before the next step, so recoveries are measured one at a time. Scale steps and reshardings are
timed the same way, and a wait for progress that times out while the job runs marks its fault
``stalled``: the report's liveness check (:func:`elasticps.chaos.report.liveness`) fails on a
stall or on a progress time over ``progress_bound_s``. A master kill waits first until a
standby is in the election, so it measures a takeover, not a cold restart.

With a store outage planned, the step after ``outage_at`` kills takes the job's etcd down
instead (SIGKILL), keeps it down ``outage`` seconds (the fault itself) and restarts it, then
measures serving again (the leading master's status answers through the store) and throughput
back the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from elasticps.chaos.job import Say
from elasticps.chaos.job_watch import progress_of, progressed
from elasticps.chaos.options import ChaosOptions
from elasticps.chaos.plan import (
    AwaitCheckpoint,
    AwaitPartition,
    Directed,
    DirectedReshard,
    DirectedScale,
    KillMaster,
    KillPServer,
    KillRole,
    KillTrainer,
    PauseTrainer,
    Planner,
    ScaleTrainers,
    Then,
    directed,
)
from elasticps.chaos.report import (
    KillRecord,
    OutageRecord,
    PauseRecord,
    ReshardRecord,
    ScaleRecord,
)
from elasticps.chaos.targets import (
    ROLES,
    PublishedProcesses,
    Target,
    serving_again,
    standby_ready,
    targets_of,
)
from elasticps.errors import ElasticPSError
from elasticps.store.keys import PSERVER_CHECKPOINT_PREFIX

# How often the loop looks at the job while it waits for something: often enough to time a
# recovery to a tenth of a second, rarely enough not to load the machine it measures.
POLL_S = 0.1


class RunningJob(Protocol):
    """What the loop needs of the job (:class:`~elasticps.chaos.job.LaunchedJob`)."""

    output: Path
    started: float

    @property
    def running(self) -> bool: ...

    def pause(self, seconds: float) -> None: ...


class JobReader(Protocol):
    """What the loop reads of the job (:class:`~elasticps.chaos.job_watch.ChaosWatch`)."""

    def processes(self) -> PublishedProcesses | None: ...

    def status(self, procs: PublishedProcesses | None = None) -> dict[str, Any] | None: ...

    def progress(self) -> int | None: ...

    def progress_marks(self) -> dict[str, int] | None: ...

    def layout(self) -> int | None: ...

    def checkpoints(self) -> set[str] | None: ...


class Landings(Protocol):
    """The stream's writer, as the loop waits on it (:class:`~elasticps.chaos.stream_writer.
    StreamWriter`)."""

    def landed(self) -> int: ...

    def wait_for_landing(self, count: int, timeout: float) -> bool: ...


class StoreSwitch(Protocol):
    """Takes the job's store down and brings it back
    (:class:`~elasticps.store.local_etcd.LocalEtcd`)."""

    def kill(self) -> None: ...

    def start(self) -> None: ...


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def send_signal(pid: int, signum: int) -> None:
    os.kill(pid, signum)


# A record whose progress is timed by a later step of its burst: (record, when, progress then).
Pending = tuple[KillRecord | ScaleRecord | ReshardRecord, float, dict[str, int]]


class ChaosLoop:
    """Faults for one running job. :meth:`step` carries out one planner step (a gap, then a
    kill or a scale step, with the recovery measured); :meth:`run` steps until the planned
    kills are delivered or the job ends. Its effects are injected (``scale_to`` writes
    ``launcher/desired_trainers``, ``kill`` sends SIGKILL), so a test can step it against a
    simulated job."""

    def __init__(self, opts: ChaosOptions, job: RunningJob, watch: JobReader,
                 planner: Planner, scale_to: Callable[[int], None], say: Say, *,
                 host: str | None = None, kill: Callable[[int], None] = sigkill,
                 store: StoreSwitch | None = None,
                 reshard_to: Callable[[int], None] | None = None,
                 signal_to: Callable[[int, int], None] = send_signal,
                 landings: Landings | None = None) -> None:
        self.opts = opts
        self.job = job
        self.watch = watch
        self.planner = planner
        self.scale_to = scale_to
        self.say = say
        self.host = host or socket.gethostname()
        self._kill = kill
        self.store = store  # with opts.outage > 0: the store an outage takes down
        self.reshard_to = reshard_to  # writes launcher/desired_pservers
        self.landings = landings  # with --stream: the writer landing its partitions
        self.reshards: list[ReshardRecord] = []
        self.outages: list[OutageRecord] = []
        self.kills: list[KillRecord] = []
        self.scales: list[ScaleRecord] = []
        self.pauses: list[PauseRecord] = []
        self.spent: set[int] = set()  # pids already killed: never signalled twice
        self._signal = signal_to  # SIGSTOP / SIGCONT (PauseTrainer)
        # The directed schedule's steps still to do (plan.directed), before the random ones.
        self.directed: list[Directed] = (
            directed(opts.schedule, opts.trainers, opts.pservers, opts.lease_ttl)
            if opts.schedule else [])
        self.directed_done: list[str] = []  # what each directed step did, in order
        self._burst: list[Pending] = []  # faults of a burst waiting for its progress
        self._checkpointed: int | None = None  # the slot of the awaited checkpoint
        self._last_slot: int | None = None  # the slot the last KillPServer hit
        self._planned_reshards = 0  # of opts.reshard, done
        self.tail_stall: float | None = None  # seconds without progress after the last fault

    def run(self, deadline: float, on_start: Callable[[], None] | None = None) -> None:
        """Step until the faults are delivered; ``on_start`` is called once training is
        under way (a stream's writer starts landing then)."""
        if self._wait(lambda: (progress_of(self.watch.status()) or 0) > 0,
                      deadline - time.monotonic()) is None:
            self.say("chaos: training never got under way (no task finished); no faults "
                     f"injected (see {self.job.output})")
            return
        if on_start is not None:
            on_start()
        while not self.finished():
            self.step()
        if self.kills or self.scales or self.reshards or self.outages or self.pauses:
            self.watch_to_the_end(deadline=self.job.started + self.opts.job_timeout)

    def watch_to_the_end(self, deadline: float) -> None:
        """After the last fault, training must keep progressing until the job ends: a job that
        makes no progress for --recovery-timeout while it runs (a stall a fault left behind,
        found only later, e.g. by a recovery dispatch) is recorded in ``tail_stall`` and the
        caller stops it, instead of waiting out --job-timeout."""
        marks = self._marks()
        last = time.monotonic()
        while self.job.running and time.monotonic() < deadline:
            status = self.watch.status()
            if status and status.get("done"):
                return  # the job finishes (its final checkpoints) without more progress
            now = self.watch.progress_marks()
            if progressed(marks, now):
                marks = {k: max(v, marks.get(k, 0)) for k, v in (now or {}).items()} | {
                    k: v for k, v in marks.items() if k not in (now or {})}
                last = time.monotonic()
            elif time.monotonic() - last > self.opts.recovery_timeout:
                self.tail_stall = time.monotonic() - last
                self.say(f"chaos: no training progress for {self.tail_stall:.0f}s after the "
                         "last fault while the job runs (a stall); stopping the job")
                return
            self.job.pause(1.0)

    def finished(self) -> bool:
        if not self.job.running:
            return True
        if (len(self.kills) >= self.opts.kills and not self.outage_due()
                and not self.reshard_due() and not self.directed):
            return True
        if time.monotonic() - self.job.started > self.opts.job_timeout:
            return True  # the caller stops the job
        status = self.watch.status()
        return bool(status and status.get("done"))

    def step(self) -> None:
        if self.outage_due():  # outside the planner's streams: the seed's kills stay the same
            self.outage()
            return
        if self.reshard_due():  # likewise
            self._planned_reshards += 1
            self.reshard(self.opts.reshard[self._planned_reshards - 1])
            return
        if self.directed:
            self.directed_step(self.directed.pop(0))
            return
        self.job.pause(self.planner.gap())
        procs = self.watch.processes()
        if procs is None or not self.job.running:
            return
        available = [role for role in ROLES if targets_of(procs, role, self.host, self.spent)]
        action = self.planner.next_action(available)
        if isinstance(action, ScaleTrainers):
            self.scale(action.trainers)
        elif isinstance(action, KillRole):
            self.kill(action.role, procs)

    # -- kills --------------------------------------------------------------------------------

    def kill(self, role: str, procs: PublishedProcesses) -> None:
        if role == "master":
            ready = self._with_standby()
            if ready is None:
                self.say("chaos: no standby master joined the election within "
                         f"{self.opts.recovery_timeout:.0f}s; this master kill is skipped")
                return
            procs = ready
        targets = targets_of(procs, role, self.host, self.spent)
        if not targets:
            return
        self.kill_target(self.planner.pick(targets), procs)

    def kill_target(self, target: Target, procs: PublishedProcesses,
                    then: Then = "progress") -> bool:
        """SIGKILL ``target`` and wait as ``then`` says; False if nothing was delivered."""
        before = self._marks()
        at = time.monotonic()
        try:
            self._kill(target.pid)
        except OSError as exc:  # gone already (or not ours): nothing was delivered
            self.spent.add(target.pid)
            self.say(f"chaos: could not kill {target.describe()}: {exc}")
            return False
        self.spent.add(target.pid)
        record = KillRecord(role=target.role, pid=target.pid, name=target.name, at=time.time())
        self.kills.append(record)
        record.serving_s = self._then_progress(
            record, at, before, then, lambda: self._serving_again(target, procs))
        self.say(f"chaos: kill {len(self.kills)}/{self.opts.kills}: {target.describe()}; "
                 + ("the next step follows at once (timed with it)" if then == "none" else
                    f"serving again after {_fmt(record.serving_s)}, throughput back after "
                    f"{_fmt(record.throughput_s)}"
                    + (" (the next step follows)" if then == "serving" else "")))
        return True

    def _with_standby(self) -> PublishedProcesses | None:
        """The processes once a standby is in the election (waited for), or None."""
        found: list[PublishedProcesses] = []

        def ready() -> bool:
            procs = self.watch.processes()
            if procs is not None and standby_ready(procs, self.spent):
                found.append(procs)
                return True
            return False

        self._wait(ready, self.opts.recovery_timeout)
        return found[-1] if found else None

    def _serving_again(self, target: Target, before: PublishedProcesses) -> bool:
        now = self.watch.processes()
        if now is None or not serving_again(target, before, now):
            return False
        return target.role != "master" or self.watch.status(now) is not None

    # -- the store outage ---------------------------------------------------------------------

    def outage_due(self) -> bool:
        return (self.store is not None and self.opts.outage > 0 and not self.outages
                and len(self.kills) >= self.opts.outage_at and self.job.running)

    def outage(self) -> None:
        assert self.store is not None
        before = self._marks()
        record = OutageRecord(time.time(), self.opts.outage)
        self.outages.append(record)
        self.store.kill()
        self.say(f"chaos: store outage: etcd SIGKILLed; it stays down {self.opts.outage:g}s")
        self.job.pause(self.opts.outage)  # the fault lasts this long (less if the job ends)
        self.store.start()
        back = time.monotonic()
        record.serving_s, record.throughput_s = self._wait_many(
            back, [lambda: self.watch.status() is not None, lambda: self._progressed(before)])
        record.stalled = self._stalled(record.throughput_s)
        self.say(f"chaos: store back after {self.opts.outage:g}s down; the master serves again "
                 f"{_fmt(record.serving_s)} and throughput is back {_fmt(record.throughput_s)} "
                 "after etcd's restart")

    # -- reshardings --------------------------------------------------------------------------

    def reshard_due(self) -> bool:
        done = len(self.reshards)
        return (self.reshard_to is not None and done < len(self.opts.reshard)
                and len(self.kills) >= self.opts.reshard_at(done) and self.job.running)

    def reshard(self, pservers: int, *, kill_first: bool = True,
                then: Then = "progress") -> None:
        """SIGKILL one pserver, then at once ask for ``pservers``: the killed shard's pushes
        since its last checkpoint are lost while the others keep theirs, so the resharding cuts
        batches applied on some old shards only (what :mod:`elasticps.pserver.reshard.lineage`
        is for)."""
        assert self.reshard_to is not None
        before = self._marks()
        record = ReshardRecord(time.time(), pservers)
        self.reshards.append(record)
        procs = self.watch.processes()
        targets = (targets_of(procs, "pserver", self.host, self.spent)
                   if procs and kill_first else [])
        if targets:
            target = self.planner.pick(targets)
            try:
                self._kill(target.pid)
                record.killed = target.describe()
            except OSError as exc:
                self.say(f"chaos: could not kill {target.describe()}: {exc}")
            self.spent.add(target.pid)
        at = time.monotonic()
        try:
            self.reshard_to(pservers)
        except ElasticPSError as exc:
            self.say(f"chaos: could not ask for {pservers} pservers: {exc}")
            return
        self.say(f"chaos: resharding to {pservers} pservers"
                 + (f" right after a SIGKILL of {record.killed}" if record.killed else ""))
        record.serving_s = self._then_progress(record, at, before, then,
                                               lambda: self._serves_layout(pservers))
        self.say(f"chaos: resharded to {pservers} pservers; serving after "
                 f"{_fmt(record.serving_s)}, throughput back after {_fmt(record.throughput_s)}")

    def _serves_layout(self, pservers: int) -> bool:
        layout = self.watch.layout()
        procs = self.watch.processes()
        return (layout == pservers and procs is not None
                and sorted(procs.slots) == list(range(pservers)))

    # -- scale steps --------------------------------------------------------------------------

    def scale(self, trainers: int, then: Then = "progress") -> None:
        before = self._marks()
        at = time.monotonic()
        try:
            self.scale_to(trainers)
        except ElasticPSError as exc:
            self.say(f"chaos: could not scale to {trainers} trainers: {exc}")
            return
        record = ScaleRecord(time.time(), trainers)
        self.scales.append(record)
        self.say(f"chaos: scaled trainers to {trainers}")

        def settled() -> bool:
            procs = self.watch.processes()
            return procs is not None and len(procs.active_trainers(self.spent)) == trainers

        # Let the step finish before the next kill: a trainer that is leaving is not replaced,
        # so killing it would measure nothing but the recovery timeout.
        record.settled_s = self._then_progress(record, at, before, then, settled)

    # -- directed schedules (plan.directed) -----------------------------------------------------

    def directed_step(self, step: Directed) -> None:
        self.directed_done.append(repr(step))
        if isinstance(step, AwaitCheckpoint):
            self.await_checkpoint()
        elif isinstance(step, KillPServer):
            slot = {"checkpointed": self._checkpointed, "same": self._last_slot}.get(
                str(step.slot), step.slot if isinstance(step.slot, int) else None)
            procs = self.watch.processes() if slot is not None else None
            found = [t for t in (targets_of(procs, "pserver", self.host, self.spent)
                                 if procs else []) if t.name == str(slot)]
            if procs is None or not found:
                self.say(f"chaos: schedule: no pserver of slot {slot} to kill on this host; "
                         "step skipped")
                self.directed_done[-1] += " skipped"
                return
            self._last_slot = int(found[0].name)
            self.kill_target(found[0], procs, step.then)
        elif isinstance(step, DirectedScale):
            self.scale(step.trainers, step.then)
        elif isinstance(step, DirectedReshard):
            self.reshard(step.pservers, kill_first=False, then=step.then)
        elif isinstance(step, PauseTrainer):
            self.pause_trainer(step.seconds)
        elif isinstance(step, AwaitPartition):
            self.await_partition()
        elif isinstance(step, KillMaster):
            self.kill_leader(step.then)
        elif isinstance(step, KillTrainer):
            self.kill_trainer(step.then)

    def await_partition(self) -> None:
        """A standby in the election, then the stream's next commit (waited for)."""
        if self.landings is None:
            self.say("chaos: schedule: no stream is written (--stream); step skipped")
            self.directed_done[-1] += " skipped"
            return
        self._with_standby()
        count = self.landings.landed()
        if self.landings.wait_for_landing(count, self.opts.recovery_timeout):
            self.say(f"chaos: schedule: partition {count} of the stream committed")
        else:
            self.say("chaos: schedule: no partition committed within --recovery-timeout")

    def kill_leader(self, then: Then) -> None:
        procs = self.watch.processes()
        found = targets_of(procs, "master", self.host, self.spent) if procs else []
        if procs is None or not found:
            self.say("chaos: schedule: no leading master to kill on this host; step skipped")
            self.directed_done[-1] += " skipped"
            return
        self.kill_target(found[0], procs, then)

    def kill_trainer(self, then: Then) -> None:
        procs = self.watch.processes()
        found = targets_of(procs, "trainer", self.host, self.spent) if procs else []
        if procs is None or not found:
            self.say("chaos: schedule: no trainer to kill on this host; step skipped")
            self.directed_done[-1] += " skipped"
            return
        self.kill_target(self.planner.pick(found), procs, then)

    def await_checkpoint(self) -> None:
        """Wait until a pserver publishes a checkpoint it had not when this began."""
        seen = self.watch.checkpoints() or set()
        fresh: list[str] = []

        def published() -> bool:
            now = self.watch.checkpoints()
            fresh.extend(sorted((now or set()) - seen))
            return bool(fresh)

        waited = self._wait(published, self.opts.recovery_timeout)
        self._checkpointed = checkpoint_slot(fresh[0]) if fresh else None
        self.say(f"chaos: schedule: pserver slot {self._checkpointed} published checkpoint "
                 f"{fresh[0]} after {_fmt(waited)}" if fresh else
                 "chaos: schedule: no new checkpoint within --recovery-timeout")

    def pause_trainer(self, seconds: float) -> None:
        """SIGSTOP a trainer for ``seconds`` (timed: the others' progress meanwhile), SIGCONT
        it (timed: progress after it woke)."""
        procs = self.watch.processes()
        targets = targets_of(procs, "trainer", self.host, self.spent) if procs else []
        if not targets:
            self.say("chaos: schedule: no trainer to pause on this host; step skipped")
            return
        target = self.planner.pick(targets)
        before = self._marks()
        at = time.monotonic()
        try:
            self._signal(target.pid, signal.SIGSTOP)
        except OSError as exc:
            self.say(f"chaos: could not stop {target.describe()}: {exc}")
            return
        record = PauseRecord(time.time(), target.name, seconds)
        self.pauses.append(record)
        try:  # the others must progress while it is stopped
            record.throughput_s = self._wait_since(at, lambda: self._progressed(before),
                                                   timeout=seconds)
            self.job.pause(max(0.0, at + seconds - time.monotonic()))
        finally:
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                self._signal(target.pid, signal.SIGCONT)
        if record.throughput_s is None:  # none yet: it may still come, up to the timeout
            record.throughput_s = self._wait_since(at, lambda: self._progressed(before))
        record.stalled = self._stalled(record.throughput_s)
        woke = time.monotonic()
        after = self._marks()
        record.after_wake_s = self._wait_since(woke, lambda: self._progressed(after))
        record.wake_stalled = self._stalled(record.after_wake_s)
        self.say(f"chaos: schedule: {target.describe()} stopped {seconds:g}s; the others "
                 f"progressed after {_fmt(record.throughput_s)}, and after it woke "
                 f"{_fmt(record.after_wake_s)}")

    # -- liveness -----------------------------------------------------------------------------

    def _then_progress(self, record: KillRecord | ScaleRecord | ReshardRecord, at: float,
                       before: dict[str, int], then: Then,
                       ready: Callable[[], bool]) -> float | None:
        """After a fault at ``at``: the seconds until ``ready`` (the role serves again, the
        scale step settled...) held, or None if not waited for. "progress" waits for ``ready``
        and, at the same time, for training to progress again: both are timed from the fault,
        each when it first held; it times the burst's earlier faults by the same progress.
        "serving" waits for ``ready`` only and "none" for nothing: the fault joins the burst."""
        if then == "none":
            self._burst.append((record, at, before))
            return None
        if then == "serving":
            self._burst.append((record, at, before))
            return self._wait_since(at, ready)
        ready_s, waited = self._wait_many(at, [ready, lambda: self._progressed(before)])
        record.throughput_s, record.stalled = waited, self._stalled(waited)
        for earlier, since, _ in self._burst:
            earlier.throughput_s = None if waited is None else at + waited - since
            earlier.stalled = record.stalled
        self._burst.clear()
        return ready_s

    def _marks(self) -> dict[str, int]:
        return self.watch.progress_marks() or {}

    def _progressed(self, before: dict[str, int]) -> bool:
        """Training moved past ``before`` (job_watch's progress marks: the master's tasks and
        recovery dispatches, each trainer's batches), or the job has nothing left to do."""
        if progressed(before, self.watch.progress_marks()):
            return True
        status = self.watch.status()
        return bool(status and status.get("done"))

    def _stalled(self, waited: float | None) -> bool:
        """A wait for progress that ended without it while the job still ran: no progress
        within --recovery-timeout, a liveness failure whatever the bound."""
        return waited is None and self.job.running

    # -- waiting ------------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> float | None:
        """Seconds until ``predicate()`` held, or None (timeout, or the job ended)."""
        return self._wait_since(time.monotonic(), predicate, timeout)

    def _wait_many(self, start: float, predicates: list[Callable[[], bool]],
                   timeout: float | None = None) -> list[float | None]:
        """Seconds from ``start`` until each predicate first held (polled together), None for
        each that did not by the timeout or the job's end."""
        deadline = start + (self.opts.recovery_timeout if timeout is None else timeout)
        found: list[float | None] = [None] * len(predicates)
        while time.monotonic() < deadline:
            for i, predicate in enumerate(predicates):
                if found[i] is None and predicate():
                    found[i] = time.monotonic() - start
            if all(f is not None for f in found) or not self.job.running:
                break
            time.sleep(POLL_S)  # a watch's polling interval
        return found

    def _wait_since(self, start: float, predicate: Callable[[], bool],
                    timeout: float | None = None) -> float | None:
        deadline = start + (self.opts.recovery_timeout if timeout is None else timeout)
        while time.monotonic() < deadline:
            if predicate():
                return time.monotonic() - start
            if not self.job.running:
                return None
            time.sleep(POLL_S)  # a watch's polling interval
        return None


def checkpoint_slot(key: str) -> int | None:
    """The slot of a ``pserver/checkpoint/<slot>/<id>`` key."""
    rest = key[len(PSERVER_CHECKPOINT_PREFIX):] if key.startswith(
        PSERVER_CHECKPOINT_PREFIX) else ""
    head = rest.split("/", 1)[0]
    return int(head) if head.isdigit() else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"
