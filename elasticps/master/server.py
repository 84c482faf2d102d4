"""The master role's life: campaign, load the snapshot, serve, watch trainers, expire leases.

A master process campaigns for ``master/election``; a standby blocks there until the leader's
lease vanishes. Once leader it loads ``master/state/`` (releasing tasks of trainers that are
gone), starts the gRPC and HTTP servers, and publishes ``master/address`` under the election
lease, so the address disappears with the leader. It stops serving and exits non-zero as soon
as it is no longer the leader (lease lost, or a fenced write refused); a supervisor (the
launcher, Kubernetes) restarts it and it becomes a standby.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc

from elasticps.errors import (
    ElasticPSError,
    NotLeaderError,
    StoreError,
    StoreUnavailableError,
    StoreValueError,
)
from elasticps.master.http_status import StatusServer
from elasticps.master.reconcile_loop import Reconciler
from elasticps.master.service import (
    ChunkLister,
    MasterServicer,
    MasterState,
    data_chunk_lister,
)
from elasticps.master.snapshot import QueueSnapshot
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import master_pb2_grpc
from elasticps.pserver.client import PServerClient
from elasticps.rpc.health import add_health, set_serving
from elasticps.rpc.server import bind, make_server
from elasticps.store.api import EventType, Lease, Op, Put, Store
from elasticps.store.election import Election
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


@dataclass(frozen=True)
class MasterOptions:
    job: str
    token: str
    host: str = "127.0.0.1"
    port: int = 0  # gRPC port; 0 = any free port, published through the store
    http_port: int = 0
    lease_ttl: int = 5  # election lease: bounds the takeover time
    policy: QueuePolicy = field(default_factory=QueuePolicy)
    dataset: str | None = None  # set this dataset at start (else the first SetDataset does)
    chunks_per_task: int = 1
    num_passes: int = 1
    # Pservers to reconcile with at every pass end (0 = none: passes end without it). Set
    # policy.reconcile to match (MasterOptions.__post_init__ does).
    num_pservers: int = 0
    reconcile_timeout: float = 30.0  # how long one round waits for a shard that is down
    node: str = field(default_factory=lambda: f"master-{socket.gethostname()}-{os.getpid()}")


def with_reconcile(options: MasterOptions) -> MasterOptions:
    """``options`` whose queue policy reconciles exactly when there are pservers."""
    want = options.num_pservers > 0
    if options.policy.reconcile == want:
        return options
    return dataclasses.replace(options,
                               policy=dataclasses.replace(options.policy, reconcile=want))


class MasterServer:
    """One master process. :meth:`run` blocks until stopped (0) or deposed (1)."""

    def __init__(self, store: Store, options: MasterOptions,
                 chunk_lister: ChunkLister = data_chunk_lister) -> None:
        self.store = store
        self.options = with_reconcile(options)
        self.chunk_lister = chunk_lister
        self.stop_event = threading.Event()
        self.state: MasterState | None = None
        self.grpc_port = 0
        self.http_port = 0
        self.serving = threading.Event()

    def stop(self) -> None:
        """Ask :meth:`run` to resign and return 0 (SIGTERM does this)."""
        self.stop_event.set()

    def run(self) -> int:
        candidacy = self._announce_candidacy()
        try:
            return self._run()
        finally:
            if candidacy is not None:
                with contextlib.suppress(StoreError):
                    candidacy.revoke()

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

    def _run(self) -> int:
        opts = self.options
        election = Election(self.store, MASTER_ELECTION, opts.node.encode(), opts.lease_ttl)
        log.info("Master %s of job %s campaigns for the lead.", opts.node, opts.job)
        while not self._campaign_once(election):
            if self.stop_event.is_set():
                return 0
        won = time.monotonic()
        log.info("Master %s of job %s is the leader; loading the state.", opts.node, opts.job)

        def commit(ops: Sequence[Op]) -> None:
            election.leader_txn(ops)

        state = MasterState(opts.job, opts.node, QueueSnapshot(self.store, commit), opts.policy,
                            self.chunk_lister)
        self.state = state
        server: grpc.Server | None = None
        http: StatusServer | None = None
        threads: list[threading.Thread] = []
        closers: list[Callable[[], None]] = []
        try:
            revision = self.store.revision()
            for kv in self.store.get_prefix(TRAINER_PREFIX):
                if not _leaving(kv.value, kv.key):
                    state.live_trainers.add(trainer_of(kv.key))
            loaded = state.snapshot.load(opts.policy, set(state.live_trainers), state.clock())
            if loaded is not None:
                state.install(loaded)
                log.info("Master %s of job %s resumed pass %d of %s in %.3fs.", opts.node,
                         opts.job, loaded.queue.pass_id, loaded.dataset.url,
                         loaded.load_seconds)
            elif opts.dataset:
                state.set_dataset(opts.dataset, opts.chunks_per_task, opts.num_passes)
            server = make_server(opts.token)
            master_pb2_grpc.add_MasterServicer_to_server(MasterServicer(state), server)
            set_serving(add_health(server), True)  # only the elected leader serves at all
            self.grpc_port = bind(server, opts.host, opts.port)
            server.start()
            http = StatusServer(state.status, opts.host, opts.http_port)
            self.http_port = http.port
            http.start()
            address = MasterAddress(f"{opts.host}:{self.grpc_port}",
                                    f"{opts.host}:{self.http_port}", opts.node)
            election.leader_txn([Put(MASTER_ADDRESS, address.encode(), election.lease.id)])
            threads = [
                threading.Thread(target=self._watch_trainers, args=(state, revision + 1),
                                 name="trainer-watch", daemon=True),
                threading.Thread(target=self._expire_loop, args=(state,), name="lease-timer",
                                 daemon=True),
            ]
            if opts.num_pservers > 0:
                shards = PServerClient(self.store, opts.token, opts.num_pservers,
                                       deadline=opts.reconcile_timeout, name=opts.node)
                closers.append(shards.close)
                reconciler = Reconciler(state, shards, self.stop_event)
                threads.append(threading.Thread(target=reconciler.run, name="reconciler",
                                                daemon=True))
            for thread in threads:
                thread.start()
            self.serving.set()
            log.info("Master %s of job %s serves gRPC on %s and status on %s, %.3fs after "
                     "winning the election.", opts.node, opts.job, address.grpc,
                     address.status_url, time.monotonic() - won)
            while not self.stop_event.wait(0.2):
                if state.deposed.is_set():
                    break
                if not election.is_leader:
                    state.deposed.set()
                    log.error("Master %s of job %s lost its election lease; it stops serving.",
                              opts.node, opts.job)
                    break
        except NotLeaderError as exc:
            state.deposed.set()
            log.error("Master %s of job %s was deposed: %s", opts.node, opts.job, exc)
        finally:
            self.stop_event.set()
            self.serving.clear()
            if server is not None:
                server.stop(grace=0.5)
            if http is not None:
                http.stop()
            for close in closers:
                close()
            for thread in threads:
                thread.join(timeout=2.0)
        if state.deposed.is_set():
            return 1
        try:
            election.resign()
            log.info("Master %s of job %s resigned.", opts.node, opts.job)
        except ElasticPSError as exc:
            log.warning("Master %s of job %s could not resign cleanly: %s", opts.node,
                        opts.job, exc)
        return 0

    def _campaign_once(self, election: Election) -> bool:
        """One bounded campaign attempt; a store outage is waited out, not fatal: a standby
        must still be there when the store comes back."""
        try:
            return election.campaign(timeout=1.0)
        except StoreUnavailableError as exc:
            log.warning("Master %s of job %s cannot reach the store to campaign (%s); it keeps "
                        "trying.", self.options.node, self.options.job, exc)
            self.stop_event.wait(0.5)  # backoff while the store is down
            return False

    def _watch_trainers(self, state: MasterState, start_revision: int) -> None:
        """A trainer key's PUT marks it live; its DELETE (lease gone) releases its tasks."""
        with self.store.watch_prefix(TRAINER_PREFIX, start_revision) as watch:
            while not self.stop_event.is_set():
                event = watch.get(timeout=0.5)
                if event is None:
                    continue
                name = trainer_of(event.key)
                try:
                    if event.type is EventType.DELETE:
                        state.trainer_gone(name, graceful=False)
                    elif _leaving(event.value, event.key):
                        state.trainer_gone(name, graceful=True)
                    else:
                        state.trainer_seen(name)
                except ElasticPSError as exc:
                    log.error("Master %s of job %s could not release trainer %s's tasks: %s",
                              self.options.node, self.options.job, name, exc)

    def _expire_loop(self, state: MasterState) -> None:
        interval = min(0.5, self.options.policy.task_lease / 4)
        while not self.stop_event.wait(interval):
            try:
                state.expire_leases()
            except ElasticPSError as exc:
                log.error("Master %s of job %s could not expire task leases: %s",
                          self.options.node, self.options.job, exc)


def _leaving(value: bytes, key: str) -> bool:
    try:
        return TrainerRegistration.decode(value, key).leaving
    except StoreValueError as exc:
        log.warning("Ignoring a malformed trainer registration: %s", exc)
        return False
