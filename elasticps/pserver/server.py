"""The ``elasticps pserver`` role's life: an explicit state machine, stepped one transition at a
time (:meth:`PServerProcess.step`), so a test can walk it state by state.

==========  ===============================================================  ==================
state       what one step does                                               next
==========  ===============================================================  ==================
STARTING    open the store, bind the gRPC port (``PADDLE_PORT``, 0 = any     CLAIMING
            free port; not serving yet), take this process's lease
CLAIMING    take the lowest free ``pserver/slot/<i>`` (``Compare.missing``)  RESTORING when
            under the lease, publishing ``{address, pid, host}``; when all   claimed; STOPPING
            are taken, wait a moment for a change under ``pserver/slot/``    on stop(); else
            (a dead pserver's slot frees when its lease expires)             CLAIMING
RESTORING   restore the slot's newest good checkpoint, start the periodic    SERVING
            checkpoint loop, start serving (a restored shard is initialised)
SERVING     wait up to ``poll_s`` for stop(); notice a lost lease            SERVING, RECLAIMING
                                                                             or STOPPING
RECLAIMING  the lease expired (a store outage): take a fresh lease and the   SERVING; RECLAIMING
            same slot under it, serving all along                            while the store is
                                                                             unreachable; LOST if
                                                                             another pserver holds
                                                                             the slot; STOPPING
STOPPING    stop serving (2 s grace), write a final checkpoint (only while    STOPPED (exit 0)
            the slot is still ours), revoke the lease it holds *now*
            (freeing the slot at once), close the store
LOST        stop serving and write no checkpoint: the slot (and its          STOPPED (exit 1)
            checkpoint directory) belongs to another pserver now
STOPPED     final
==========  ===============================================================  ==================

Every checkpoint is published in a store transaction that checks the slot key is still the one
this process created (its ``create_revision``; see :mod:`elasticps.pserver.checkpoint.files`), so a
process that lost its slot (its lease expired and another pserver claimed the slot) cannot
replace the new owner's checkpoints, whatever its periodic loop or its shutdown tries.

Everything started is entered into ONE :class:`contextlib.ExitStack` as it starts, so stopping
is one ``close()`` in reverse start order: stop serving, end the checkpoint loop (and write the
final checkpoint when STOPPING), revoke the current lease, release the port, close the store.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import ClassVar, Protocol

import grpc

from elasticps.config import Config
from elasticps.errors import CheckpointError, ConfigError, LeaseExpiredError, StoreError
from elasticps.lifecycle import Lifecycle
from elasticps.proto import pserver_pb2_grpc
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint.files import BeforePublish, ShardCheckpoints
from elasticps.pserver.limits import ShardLimits
from elasticps.pserver.service import CheckpointNow, ParameterServerServicer
from elasticps.pserver.shard import ShardState
from elasticps.pserver.sync_members import RoundMembers
from elasticps.pserver.telemetry import CheckpointClock, PServerMetrics, TimedServicer
from elasticps.rpc import bind, credentials_from_config, make_server
from elasticps.rpc.call_metrics import ServerCallMetrics
from elasticps.rpc.health import add_health, serve_health, set_serving
from elasticps.store import Compare, Lease, Put, Store, open_store
from elasticps.store.keys import (
    PSERVER_SLOT_PREFIX,
    JobEvent,
    PServerSlot,
    pserver_slot,
    read_pserver_layout,
    read_sealed_below,
    record_event,
)
from elasticps.telemetry.logfmt import process_node, set_node
from elasticps.telemetry.role import RoleTelemetry

log = logging.getLogger(__name__)


class PServerState(enum.Enum):
    STARTING = "starting"
    CLAIMING = "claiming"
    RESTORING = "restoring"
    SERVING = "serving"
    RECLAIMING = "reclaiming"
    STOPPING = "stopping"
    LOST = "lost"
    STOPPED = "stopped"

    @property
    def final(self) -> bool:
        return self is PServerState.STOPPED


S = PServerState
# Every transition step() may make; step() refuses any other, so the table is the truth.
TRANSITIONS: dict[PServerState, frozenset[PServerState]] = {
    S.STARTING: frozenset({S.CLAIMING}),
    S.CLAIMING: frozenset({S.CLAIMING, S.RESTORING, S.STOPPING}),
    S.RESTORING: frozenset({S.SERVING}),
    S.SERVING: frozenset({S.SERVING, S.RECLAIMING, S.STOPPING}),
    S.RECLAIMING: frozenset({S.RECLAIMING, S.SERVING, S.LOST, S.STOPPING}),
    S.STOPPING: frozenset({S.STOPPED}),
    S.LOST: frozenset({S.STOPPED}),
    S.STOPPED: frozenset(),
}


class Endpoint(Protocol):
    """The pserver's RPC server: bound first (its address goes into the slot), serving later."""

    address: str

    def serve(self, servicer: ParameterServerServicer) -> None: ...

    def stop(self, grace: float | None) -> None: ...


class GrpcEndpoint:
    """:class:`Endpoint` over a real gRPC server: mutual TLS (unless the job is insecure), the
    job token, and requests of at most ``PADDLE_MAX_MESSAGE_MB``."""

    def __init__(self, config: Config, call_metrics: ServerCallMetrics | None = None) -> None:
        credentials = credentials_from_config(config)
        # Sync mode: a push holds its thread while its step's barrier is open, so every call
        # the server admits gets a thread (the pool starts them only when needed); otherwise
        # 16 waiting pushes would keep the 17th trainer's push, which closes the round, queued.
        limit = config.call_limit("pserver")
        workers = limit if config.mode == "sync" else 16
        self._server = make_server(credentials, max_workers=workers,
                                   max_receive_bytes=config.max_message_mb << 20,
                                   max_concurrent_rpcs=limit, call_metrics=call_metrics)
        port = bind(self._server, config.host, config.port, credentials)
        self.address = f"{config.host}:{port}"
        self._health_port = config.health_port
        self._host = config.host
        self._probes: grpc.Server | None = None

    def serve(self, servicer: ParameterServerServicer) -> None:
        pserver_pb2_grpc.add_ParameterServerServicer_to_server(servicer, self._server)
        health = add_health(self._server)
        set_serving(health, True)  # slot claimed and restored: ready
        self._server.start()
        if self._health_port:
            self._probes = serve_health(health, self._host, self._health_port)[0]

    def stop(self, grace: float | None) -> None:
        if self._probes is not None:
            self._probes.stop(None)
        self._server.stop(grace).wait()


class PServerProcess(Lifecycle[PServerState]):
    """One pserver role process: step it, or :meth:`run` it until stopped.

    ``before_publish`` is handed to :class:`ShardCheckpoints` (tests inject faults with it);
    ``endpoint`` makes the RPC server, counting its calls into the metrics it is given (unit
    tests pass one that binds nothing).
    """

    def __init__(self, config: Config, stop: threading.Event | None = None, *,
                 before_publish: BeforePublish | None = None,
                 endpoint: Callable[[Config, ServerCallMetrics], Endpoint] = GrpcEndpoint,
                 poll_s: float = 0.5) -> None:
        if not config.store:
            raise ConfigError("the pserver needs PADDLE_STORE (etcd://... or file://...)")
        self.config = config
        self.stop = stop or threading.Event()
        self.before_publish = before_publish
        self.poll_s = poll_s
        super().__init__(PServerState.STARTING, f"pserver (job {config.job_name})")
        # exit_code: 0 stopped, 1 lost its slot; set on STOPPED
        self.incarnation = uuid.uuid4().hex[:12]
        self.num_shards = config.pserver_count
        self.node = f"pserver (job {config.job_name})"
        self.slot: int | None = None
        self.lease: Lease | None = None  # the lease the slot lives under NOW (see RECLAIMING)
        self.shard: ShardState | None = None
        self.last_checkpoint = ""
        self._make_endpoint = endpoint
        self._store: Store | None = None
        self._endpoint: Endpoint | None = None
        self._slot_value = b""
        self._claim_revision = 0  # create_revision of our slot key: fences checkpoint writes
        self._warned_full = False
        self._saved_version = -1
        self._saving = threading.Lock()  # the periodic loop and Checkpoint RPCs take turns
        self._halt = threading.Event()  # ends the checkpoint loop
        self.telemetry = RoleTelemetry(config.job_name, "pserver", process_node("pserver"))
        self.checkpoint_clock = CheckpointClock(interval_s=config.checkpoint_interval)
        self.metrics = PServerMetrics(self.telemetry.registry, lambda: self.shard,
                                      self.checkpoint_clock)
        self.call_metrics = ServerCallMetrics(self.telemetry.registry)

    # -- driving ----------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        assert self._store is not None, "the pserver has not started"
        return self._store

    # -- one method per state ---------------------------------------------------------------

    def _start(self) -> PServerState:
        config = self.config
        assert config.store is not None
        self._store = open_store(config.store, config.job_name)
        self._stack.callback(self._store.close)
        self.telemetry.start(config.host, config.metrics_port)
        self._stack.callback(self.telemetry.close)
        self.telemetry.publish(self._store, config.lease_ttl)
        self._endpoint = self._make_endpoint(config, self.call_metrics)
        self._stack.callback(self._endpoint.stop, None)
        layout = read_pserver_layout(self._store)  # a resharded job: its count, not ours
        if layout is not None and layout.shards != self.num_shards:
            log.info("Job %s was resharded to %d pservers (generation %d); this pserver serves "
                     "that layout, not PADDLE_NUM_PSERVERS=%d.", config.job_name, layout.shards,
                     layout.generation, self.num_shards)
            self.num_shards = layout.shards
        self._slot_value = PServerSlot(self._endpoint.address).encode()
        self.lease = self._fresh_lease()
        # Revokes whichever lease is current when the stack closes: after a reclaim that is the
        # new one (revoking the first, long gone, left the slot held for a TTL after exit).
        self._stack.callback(self._revoke_lease)
        return S.CLAIMING

    def _claim(self) -> PServerState:
        if self.stop.is_set():
            return S.STOPPING
        store, lease = self.store, self.lease
        assert lease is not None
        watch = store.watch_prefix(PSERVER_SLOT_PREFIX, start_revision=store.revision() + 1)
        try:
            for slot in range(self.num_shards):
                key = pserver_slot(slot)
                claimed = store.txn([Compare.missing(key)], [Put(key, self._slot_value, lease.id)])
                if claimed.succeeded:
                    self._claim_revision = claimed.revision
                    self.slot = slot
                    self.node = f"pserver {slot} of {self.num_shards} (job {self.config.job_name})"
                    set_node(f"pserver-{slot}")
                    self.telemetry.rename(f"pserver-{slot}", shard=str(slot))
                    log.info("%s claimed its slot at %s.", self.node, self._address)
                    return S.RESTORING
            if not self._warned_full:
                log.warning("Job %s: all %d pserver slots are taken; this pserver waits for one "
                            "to free (a dead pserver's slot frees when its lease expires).",
                            self.config.job_name, self.num_shards)
                self._warned_full = True
            watch.get(timeout=self.poll_s)  # any change under pserver/slot/ may have freed one
        finally:
            watch.cancel()
        return S.STOPPING if self.stop.is_set() else S.CLAIMING

    def _restore_and_serve(self) -> PServerState:
        assert self.slot is not None
        assert self._endpoint is not None
        limits = ShardLimits(memory_bytes=self.config.pserver_memory_mb << 20,
                             max_ids_per_request=self.config.max_ids_per_request,
                             max_tables=self.config.max_tables)
        state = ShardState(self.slot, self.num_shards, limits, mode=self.config.mode,
                           stream_period_s=self.config.stream_period_s)
        self.shard = state
        if state.push_mode.has_rounds:  # sync: the barrier forgets trainers that die
            self._stack.enter_context(RoundMembers(self.store, state, self.node).following())
        checkpoints = self._restore(state)
        checkpoint_now: CheckpointNow | None = None
        if checkpoints is not None:
            self.checkpoint_clock.current_unix = time.time()  # restored, or empty: all saved
            self._stack.enter_context(self._checkpointing(state, checkpoints))
            checkpoint_now = functools.partial(self._checkpoint_now, state, checkpoints)
        servicer = TimedServicer(state, self.incarnation, lambda: self.last_checkpoint,
                                 checkpoint_now, rpc=self.metrics.rpc)
        self._endpoint.serve(servicer)
        self._stack.callback(self._endpoint.stop, 2.0)  # pushed last: the first thing undone
        log.info("%s is serving at %s (initialised: %s, %s mode).", self.node, self._address,
                 state.initialized, state.mode)
        return S.SERVING

    def _serve(self) -> PServerState:
        if self.stop.wait(self.poll_s):
            return S.STOPPING
        assert self.lease is not None
        if self.lease.expired:
            log.error("%s lost its store lease; it tries to reclaim slot %d.", self.node,
                      self.slot)
            return S.RECLAIMING
        return S.SERVING

    def _reclaim(self) -> PServerState:
        if self.stop.is_set():
            return S.STOPPING
        assert self.slot is not None
        assert self.lease is not None
        key = pserver_slot(self.slot)
        try:
            if self.lease.expired:
                self.lease = self._fresh_lease()  # from now on, the one to revoke at exit
            lease = self.lease
            taken = self.store.txn([Compare.missing(key)], [Put(key, self._slot_value, lease.id)])
            holder = None if taken.succeeded else self.store.get(key)
            if taken.succeeded:
                self._claim_revision = taken.revision
        except (StoreError, LeaseExpiredError) as exc:
            log.error("%s cannot reach the store yet (%s); it keeps serving and retries.",
                      self.node, exc)
            return S.STOPPING if self.stop.wait(self.poll_s) else S.RECLAIMING
        if not taken.succeeded and holder is None:
            return S.RECLAIMING  # it freed up between the txn and the read: try again
        if holder is not None and holder.lease != lease.id:
            log.error("%s: slot %d was taken by another pserver; this one exits.", self.node,
                      self.slot)
            return S.LOST
        if holder is not None:  # under our own lease: a retried txn had already reclaimed it
            self._claim_revision = holder.create_revision
        log.info("%s reclaimed slot %d.", self.node, self.slot)
        return S.SERVING

    def _stop_cleanly(self) -> PServerState:
        log.info("%s is shutting down.", self.node)
        self._stack.close()
        self.exit_code = 0
        return S.STOPPED

    def _stop_lost(self) -> PServerState:
        self._stack.close()  # the checkpoint loop sees LOST and writes nothing more
        self.exit_code = 1
        return S.STOPPED

    transitions = TRANSITIONS
    steps: ClassVar[dict[PServerState, Callable[[PServerProcess], PServerState]]] = {
        S.STARTING: _start,
        S.CLAIMING: _claim,
        S.RESTORING: _restore_and_serve,
        S.SERVING: _serve,
        S.RECLAIMING: _reclaim,
        S.STOPPING: _stop_cleanly,
        S.LOST: _stop_lost,
    }

    # -- helpers of the steps ---------------------------------------------------------------

    @property
    def _address(self) -> str:
        return self._endpoint.address if self._endpoint is not None else "?"

    def _fresh_lease(self) -> Lease:
        lease = self.store.grant_lease(self.config.lease_ttl)
        lease.keep_alive()
        return lease

    def _record_restore(self, checkpoint_id: str, applied: int, took: float) -> None:
        """The timeline's entry for a restored shard (a pserver came back)."""
        try:
            record_event(self.store, JobEvent(
                "recovery", f"pserver-{self.slot}",
                f"pserver {self.slot} restored checkpoint {checkpoint_id} ({applied} applied "
                f"batches) in {took:.2f}s", f"pserver-{self.slot}"))
        except StoreError as exc:
            log.warning("%s could not record its restore in the timeline: %s", self.node, exc)

    def _slot_owned(self) -> Compare | None:
        """The compare that holds while our slot key is the one we created (a checkpoint is
        published only under it: once another process claimed the slot, ours never is)."""
        if self.slot is None or not self._claim_revision:
            return None
        return Compare.create_revision(pserver_slot(self.slot), self._claim_revision)

    def _revoke_lease(self) -> None:
        lease = self.lease
        if lease is None:
            return
        try:
            lease.revoke()
        except StoreError as exc:
            log.warning("%s could not revoke its lease (%s); the slot frees when it expires.",
                        self.node, exc)

    def _restore(self, state: ShardState) -> ShardCheckpoints | None:
        config = self.config
        assert self.slot is not None
        if not config.checkpoint_url:
            log.warning("%s has no PADDLE_CHECKPOINT_URL: its shard is lost if it dies.", self.node)
            self._refuse_sealed_passes(state)
            return None
        checkpoints = ShardCheckpoints(
            config.checkpoint_url, self.slot, self.num_shards, keep=config.checkpoint_keep,
            store=self.store, before_publish=self.before_publish, node=self.node,
            owner=self._slot_owned, writer=self.incarnation, deltas=config.checkpoint_deltas,
        )
        removed = checkpoints.remove_temp_files()
        if removed:
            log.warning("%s removed %d unfinished checkpoint file(s) of a crashed write.",
                        self.node, removed)
        started = time.perf_counter()
        loaded = checkpoints.load_newest()
        if loaded is None:
            log.info("%s found no checkpoint under %s; it starts empty.", self.node,
                     config.checkpoint_url)
            self._refuse_sealed_passes(state)
        else:
            snap, manifest = loaded
            state.restore(snap, manifest.id)
            self.last_checkpoint = manifest.id
            took = time.perf_counter() - started
            self.checkpoint_clock.restore_s = took
            self.checkpoint_clock.last_unix = manifest.created_unix
            log.info("%s restored checkpoint %s (%d applied batches).", self.node, manifest.id,
                     len(snap.applied))
            self._record_restore(manifest.id, len(snap.applied), took)
        self._saved_version = state.version
        return checkpoints

    def _refuse_sealed_passes(self, state: ShardState) -> None:
        """A shard that starts empty raises its floor to the job's sealed passes: a very late
        push of a sealed pass counts as applied (refused) instead of landing on a fresh shard
        (docs/fault-tolerance.md: what a restart without a checkpoint loses)."""
        sealed = read_sealed_below(self.store)
        if sealed > 0:
            state.prune_applied(sealed)
            log.error("%s starts with no checkpoint while passes below %d are sealed: its share "
                      "of their training is lost, and their late pushes are refused.",
                      self.node, sealed)

    @contextlib.contextmanager
    def _checkpointing(self, state: ShardState, checkpoints: ShardCheckpoints) -> Iterator[None]:
        """The periodic checkpoint loop; on the way out, after serving stopped, a final
        checkpoint — only on a clean stop: once LOST, the slot's directory is not ours."""
        saver = threading.Thread(target=self._checkpoint_loop, args=(state, checkpoints),
                                 name="checkpoint", daemon=True)
        saver.start()
        try:
            yield
        finally:
            self._halt.set()
            saver.join()
            if self.state is S.STOPPING and self._owns_slot():
                self._checkpoint(state, checkpoints)

    def _checkpoint_loop(self, state: ShardState, checkpoints: ShardCheckpoints) -> None:
        while not self._halt.wait(self.config.checkpoint_interval):
            self._checkpoint(state, checkpoints)

    def _checkpoint(self, state: ShardState, checkpoints: ShardCheckpoints) -> None:
        try:
            self._checkpoint_now(state, checkpoints)
        except CheckpointError as exc:
            log.error("%s could not write a checkpoint: %s", self.node, exc)

    def _owns_slot(self) -> bool:
        """Whether our slot key is still the one we created (a store that cannot be reached
        counts as yes: the fenced publication decides then)."""
        fence = self._slot_owned()
        if fence is None:
            return False
        try:
            held = self.store.get(fence.key)
        except StoreError:
            return True
        if held is not None and held.create_revision == fence.expected:
            return True
        log.warning("%s lost slot %s to another pserver (or its lease expired); it writes no "
                    "final checkpoint.", self.node, self.slot)
        return False

    def _checkpoint_now(
        self, state: ShardState, checkpoints: ShardCheckpoints
    ) -> tuple[str, AppliedSet]:
        """Checkpoint if anything changed; the id of the checkpoint holding the current state
        and that state's applied set. CheckpointError if it cannot be written."""
        with self._saving:
            with state.lock:
                if state.version == self._saved_version:
                    self.checkpoint_clock.current_unix = time.time()
                    return self.last_checkpoint, state.applied.copy()
            started, taken_unix = time.perf_counter(), time.time()
            snap, version = state.snapshot(delta=checkpoints.wants_delta())
            try:
                manifest = checkpoints.save(snap)
            except (OSError, StoreError, ValueError) as exc:
                raise CheckpointError(f"{self.node} could not write a checkpoint: {exc}") from exc
            self.metrics.checkpoint.observe(time.perf_counter() - started)
            self.checkpoint_clock.last_unix = time.time()
            self.checkpoint_clock.current_unix = taken_unix  # it holds the shard as of then
            self._saved_version = version
            self.last_checkpoint = manifest.id
            return manifest.id, snap.applied


def main(config: Config, *, before_publish: BeforePublish | None = None) -> int:
    """Run the role until SIGTERM/SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return PServerProcess(config, stop, before_publish=before_publish).run()
