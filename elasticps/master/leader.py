"""One master process's life as a leader: an explicit state machine, stepped one transition at a
time (:meth:`Leader.step`), so a test can walk it state by state.

=============  ==========================================================  ====================
state          what one step does                                          next
=============  ==========================================================  ====================
STARTING       announce ``master/candidate/<node>`` under its own lease    CAMPAIGNING
CAMPAIGNING    one bounded attempt (``campaign_s``) at ``master/election``  LOADING when won;
               (a store outage is waited out: a standby must still be      RESIGNING on stop(),
               there when the store comes back); a standby told to stop    won or not; else
               never leads, even if it wins (at a job's end every master   CAMPAIGNING
               is stopped at once, and the leader's resignation must not
               make a standby take a job that is over)
LOADING        read the live trainers, load ``master/state/`` (or set the  SERVING; DEPOSED if
               dataset it was given), start the trainer watch, the task-   a fenced write is
               lease timer, the reconcile loop, HTTP status and gRPC;      refused
               publish ``master/address`` under the election lease
SERVING        wait up to ``poll_s`` for stop() or for losing the lead     SERVING, RESIGNING
                                                                           or DEPOSED
RESIGNING      stop every component, give the lock up, end the candidacy  STOPPED (exit 0)
DEPOSED        stop every component and write nothing more: the lock is    STOPPED (exit 1)
               someone else's (and the store may be down)
STOPPED        final
=============  ==========================================================  ====================

Everything the leader starts (the candidacy lease, its place in the election, the background
threads, the pserver client, the HTTP and gRPC servers, the ``serving`` flag) is entered into
ONE :class:`contextlib.ExitStack` as it starts, so stopping is one ``close()`` in reverse start
order whatever state the leader reached; an exception in LOADING closes exactly what had started.

The servers and the pserver client come from :class:`Components` (``server.py`` wires the real
ones), so unit tests step the machine over an embedded store with fakes and no socket.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar, Protocol

from elasticps.errors import (
    ElasticPSError,
    NotLeaderError,
    StoreError,
    StoreUnavailableError,
    StoreValueError,
)
from elasticps.lifecycle import Lifecycle
from elasticps.master.options import MasterOptions, with_reconcile
from elasticps.master.reconcile_loop import Reconciler, Shards
from elasticps.master.service import ChunkLister, MasterState, SourceFactory
from elasticps.master.snapshot import QueueSnapshot
from elasticps.master.status_access import published_status
from elasticps.master.status_loop import StatusLoop
from elasticps.master.stream_loop import StreamFollower
from elasticps.store.api import Event, EventType, KeyValue, Lease, Op, Put, Store
from elasticps.store.election import Election
from elasticps.store.follow import PrefixFollower
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MASTER_ELECTION,
    TRAINER_PREFIX,
    MasterAddress,
    ProcessInfo,
    TrainerRegistration,
    master_candidate,
    trainer_of,
)

log = logging.getLogger(__name__)

# How long a background thread is waited for on the way out; they are daemon threads, so one
# stuck in a store call cannot keep the process alive past this.
_JOIN_S = 2.0
# How often the trainer watch looks at the halt flag between events: a resigning leader waits
# for it, and at a job's end the job waits for the leader.
_WATCH_POLL_S = 0.1


class LeaderState(enum.Enum):
    STARTING = "starting"
    CAMPAIGNING = "campaigning"
    LOADING = "loading"
    SERVING = "serving"
    RESIGNING = "resigning"
    DEPOSED = "deposed"
    STOPPED = "stopped"

    @property
    def final(self) -> bool:
        return self is LeaderState.STOPPED


S = LeaderState
# Every transition step() may make; step() refuses any other, so the table is the truth.
TRANSITIONS: dict[LeaderState, frozenset[LeaderState]] = {
    S.STARTING: frozenset({S.CAMPAIGNING}),
    S.CAMPAIGNING: frozenset({S.CAMPAIGNING, S.LOADING, S.RESIGNING}),
    S.LOADING: frozenset({S.SERVING, S.DEPOSED}),
    S.SERVING: frozenset({S.SERVING, S.RESIGNING, S.DEPOSED}),
    S.RESIGNING: frozenset({S.STOPPED}),
    S.DEPOSED: frozenset({S.STOPPED}),
    S.STOPPED: frozenset(),
}


class ShardClient(Shards, Protocol):
    """The pserver client the reconcile loop asks; closed when the leader stops."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Components:
    """How the leader starts what it serves. Each server is a context manager yielding the port
    it bound; ``shards`` is called only when the job has pservers to reconcile with."""

    rpc: Callable[[MasterState], AbstractContextManager[int]]
    status: Callable[[MasterState], AbstractContextManager[int]]
    shards: Callable[[], ShardClient]


class Leader(Lifecycle[LeaderState]):
    """One master process in the election: step it, or :meth:`run` it to the end."""

    def __init__(self, store: Store, options: MasterOptions, chunk_lister: ChunkLister,
                 components: Components, *, poll_s: float = 0.2,
                 campaign_s: float = 1.0,
                 observe_write: Callable[[float], None] | None = None,
                 source_for: SourceFactory | None = None) -> None:
        self.store = store
        self.options = with_reconcile(options)
        self.chunk_lister = chunk_lister
        self.source_for = source_for  # a stream's partition source (None: no streams)
        self.components = components
        self.poll_s = poll_s
        self.campaign_s = campaign_s
        super().__init__(LeaderState.STARTING,
                         f"Master {self.options.node} of job {self.options.job}")
        # exit_code: 0 resigned, 1 deposed; set on reaching STOPPED
        self.master_state: MasterState | None = None  # the queue, from LOADING on
        self.status_loop: StatusLoop | None = None  # the status page's loop, from LOADING on
        self._observe_write = observe_write  # seconds of each fenced write (metrics)
        self.grpc_port = 0
        self.http_port = 0
        self.serving = threading.Event()  # set while SERVING with the address published
        self.election = Election(store, MASTER_ELECTION, self.options.node.encode(),
                                 self.options.lease_ttl)
        self._stop = threading.Event()  # stop() was asked for (SIGTERM)
        self._halt = threading.Event()  # tells the background threads to end
        self._won_at = 0.0

    # -- driving ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the leader to resign and stop (safe from a signal handler or another thread)."""
        self._stop.set()

    def _act(self, state: LeaderState) -> LeaderState:
        try:
            return super()._act(state)
        except NotLeaderError as exc:
            if state not in (S.LOADING, S.SERVING):
                raise
            return self._deposed(f"was deposed: {exc}")

    # -- one method per state ---------------------------------------------------------------

    def _start(self) -> LeaderState:
        candidacy = self._announce_candidacy()
        if candidacy is not None:
            self._stack.callback(_revoke_quietly, candidacy)
        self._stack.callback(self._leave_election)
        log.info("Master %s of job %s campaigns for the lead.", self.options.node,
                 self.options.job)
        return S.CAMPAIGNING

    def _campaign(self) -> LeaderState:
        try:
            won = self.election.campaign(timeout=self.campaign_s)
        except StoreUnavailableError as exc:
            log.warning("Master %s of job %s cannot reach the store to campaign (%s); it keeps "
                        "trying.", self.options.node, self.options.job, exc)
            self._stop.wait(0.5)  # backoff while the store is down
            won = False
        if won and self._stop.is_set():
            log.info("Master %s of job %s won the election while stopping; it gives the lead "
                     "up without taking it.", self.options.node, self.options.job)
            return S.RESIGNING
        if won:
            self._won_at = time.monotonic()
            log.info("Master %s of job %s is the leader; loading the state.", self.options.node,
                     self.options.job)
            return S.LOADING
        return S.RESIGNING if self._stop.is_set() else S.CAMPAIGNING

    def _load(self) -> LeaderState:
        opts = self.options
        state = MasterState(opts.job, opts.node, QueueSnapshot(self.store, self._commit),
                            opts.policy, self.chunk_lister, source_for=self.source_for)
        self.master_state = state
        revision = self.store.revision()
        self._load_queue(state)
        stack = self._stack
        stack.enter_context(self._background(
            "trainer-watch", functools.partial(self._watch_trainers, state, revision + 1)))
        stack.enter_context(self._background(
            "lease-timer", functools.partial(self._expire_task_leases, state)))
        if opts.num_pservers > 0:
            stack.enter_context(self._reconciling(state))
        follower = StreamFollower(state, self._halt, poll_s=opts.stream_poll_s)
        stack.enter_context(self._background("stream-follower", follower.run))
        self.status_loop = StatusLoop(self.store, state, num_pservers=opts.num_pservers,
                                      commit=self._commit, halt=self._halt,
                                      interval=opts.status_interval)
        # The thread keeps its name: benchmarks/thread_cpu.py reports CPU by thread name.
        stack.enter_context(self._background("observer", self.status_loop.run))
        self.http_port = stack.enter_context(self.components.status(state))
        self.grpc_port = stack.enter_context(self.components.rpc(state))
        http_host, scheme = published_status(opts.http_host, opts.host, opts.credentials)
        address = MasterAddress(f"{opts.host}:{self.grpc_port}", f"{http_host}:{self.http_port}",
                                opts.node, http_scheme=scheme)
        # Under the election lease: the address vanishes with the leader.
        self.election.leader_txn([Put(MASTER_ADDRESS, address.encode(), self.election.lease.id)])
        self.serving.set()
        stack.callback(self.serving.clear)  # pushed last: the first thing undone
        log.info("Master %s of job %s serves gRPC on %s and status on %s, %.3fs after winning "
                 "the election.", opts.node, opts.job, address.grpc, address.status_url,
                 time.monotonic() - self._won_at)
        return S.SERVING

    def _serve(self) -> LeaderState:
        stop = self._stop.wait(self.poll_s)
        state = self.master_state
        assert state is not None
        if state.deposed.is_set():  # a handler's fenced write was refused (and logged why)
            return S.DEPOSED
        if not self.election.is_leader:
            return self._deposed("lost its election lease")
        return S.RESIGNING if stop else S.SERVING

    def _resign(self) -> LeaderState:
        # Components in reverse start order, then the lock (_leave_election), then the candidacy.
        self._stack.close()
        self.exit_code = 0
        return S.STOPPED

    def _stop_deposed(self) -> LeaderState:
        self._stack.close()  # _leave_election writes nothing: we are DEPOSED
        self.exit_code = 1
        return S.STOPPED

    transitions = TRANSITIONS
    steps: ClassVar[dict[LeaderState, Callable[[Leader], LeaderState]]] = {
        S.STARTING: _start,
        S.CAMPAIGNING: _campaign,
        S.LOADING: _load,
        S.SERVING: _serve,
        S.RESIGNING: _resign,
        S.DEPOSED: _stop_deposed,
    }

    # -- helpers of the steps ---------------------------------------------------------------

    def _deposed(self, why: str) -> LeaderState:
        if self.master_state is not None:
            self.master_state.deposed.set()  # every handler refuses from now on
        log.error("Master %s of job %s %s; it stops serving.", self.options.node,
                  self.options.job, why)
        return S.DEPOSED

    def _commit(self, ops: Sequence[Op]) -> None:
        started = time.perf_counter()
        self.election.leader_txn(ops)
        if self._observe_write is not None:
            self._observe_write(time.perf_counter() - started)

    def _announce_candidacy(self) -> Lease | None:
        """``master/candidate/<node>`` under our own lease: who is in the election, leader or
        standby, for operators and ``elasticps chaos``. Best effort: the election does not
        depend on it."""
        opts = self.options
        try:
            lease = self.store.grant_lease(opts.lease_ttl)
            lease.keep_alive()
            self.store.put(master_candidate(opts.node), ProcessInfo().encode(), lease.id)
            return lease
        except StoreError as exc:
            log.warning("Master %s of job %s could not announce its candidacy: %s", opts.node,
                        opts.job, exc)
            return None

    def _leave_election(self) -> None:
        """Give the lock (and the campaign lease) up at once when leaving of our own will, so
        a standby takes over now rather than a TTL later. Deposed or failed: write nothing."""
        if self.state is not S.RESIGNING:
            return
        led = self.master_state is not None
        try:
            self.election.resign()
        except ElasticPSError as exc:
            log.warning("Master %s of job %s could not resign cleanly: %s", self.options.node,
                        self.options.job, exc)
            return
        if led:
            log.info("Master %s of job %s resigned.", self.options.node, self.options.job)

    def _load_queue(self, state: MasterState) -> None:
        """Resume the queue from the store (releasing tasks of trainers that are gone), or set
        the dataset we were given."""
        opts = self.options
        for kv in self.store.get_prefix(TRAINER_PREFIX):
            if not _leaving(kv.value, kv.key):
                state.live_trainers.add(trainer_of(kv.key))
        loaded = state.snapshot.load(opts.policy, set(state.live_trainers), state.clock())
        if loaded is not None:
            state.install(loaded)
            log.info("Master %s of job %s resumed pass %d of %s in %.3fs.", opts.node, opts.job,
                     loaded.queue.pass_id, loaded.dataset.url, loaded.load_seconds)
        elif opts.dataset and opts.batch_plan is not None:
            state.set_dataset(opts.dataset, opts.chunks_per_task, opts.num_passes,
                              opts.batch_plan)

    @contextlib.contextmanager
    def _background(self, name: str, target: Callable[[], None]) -> Iterator[None]:
        """A daemon thread for as long as the leader serves; told to end and joined on exit."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._halt.set()
            thread.join(timeout=_JOIN_S)

    @contextlib.contextmanager
    def _reconciling(self, state: MasterState) -> Iterator[None]:
        """The reconcile loop and the pserver client it asks at every pass end."""
        shards = self.components.shards()
        thread = threading.Thread(target=Reconciler(state, shards, self._halt).run,
                                  name="reconciler", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._halt.set()
            state.reconcile_wanted.set()  # ends the reconciler's wait now, not at its next poll
            shards.close()  # before the join: it ends a call waiting for a shard that is down
            thread.join(timeout=_JOIN_S)

    def _watch_trainers(self, state: MasterState, start_revision: int) -> None:
        """A trainer key's PUT marks it live; its DELETE (lease gone) releases its tasks. A
        watch that fails is re-created from a fresh listing (store/follow.py), which releases
        the tasks of every trainer whose key vanished meanwhile."""
        follower = PrefixFollower(
            self.store, TRAINER_PREFIX, functools.partial(self._trainer_event, state),
            functools.partial(self._trainer_listing, state),
            who=f"Master {self.options.node} of job {self.options.job}", poll_s=_WATCH_POLL_S)
        follower.run(self._halt, start_revision)

    def _trainer_event(self, state: MasterState, event: Event) -> None:
        name = trainer_of(event.key)
        if event.type is EventType.DELETE:
            self._release(state, name, graceful=False)
        elif _leaving(event.value, event.key):
            self._release(state, name, graceful=True)
        else:
            state.trainer_seen(name)

    def _trainer_listing(self, state: MasterState, listing: list[KeyValue]) -> None:
        """Every trainer key after a watch gap: the ones that vanished are gone."""
        leaving = {trainer_of(kv.key) for kv in listing if _leaving(kv.value, kv.key)}
        live = {trainer_of(kv.key) for kv in listing} - leaving
        for name in sorted(live):
            state.trainer_seen(name)
        for name in sorted(state.known_trainers() - live):
            self._release(state, name, graceful=name in leaving)

    def _release(self, state: MasterState, name: str, *, graceful: bool) -> None:
        try:
            state.trainer_gone(name, graceful=graceful)
        except ElasticPSError as exc:
            log.error("Master %s of job %s could not release trainer %s's tasks: %s",
                      self.options.node, self.options.job, name, exc)

    def _expire_task_leases(self, state: MasterState) -> None:
        interval = min(0.5, self.options.policy.task_lease / 4)
        while not self._halt.wait(interval):
            try:
                state.expire_leases()
            except ElasticPSError as exc:
                log.error("Master %s of job %s could not expire task leases: %s",
                          self.options.node, self.options.job, exc)


def _revoke_quietly(lease: Lease) -> None:
    with contextlib.suppress(StoreError):
        lease.revoke()


def _leaving(value: bytes, key: str) -> bool:
    try:
        return TrainerRegistration.decode(value, key).leaving
    except StoreValueError as exc:
        log.warning("Ignoring a malformed trainer registration: %s", exc)
        return False
