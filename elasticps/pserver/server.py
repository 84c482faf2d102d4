"""The ``elasticps pserver`` role: claim a slot, restore, serve, checkpoint, exit cleanly.

Start-up order matters:

1. bind the gRPC port (``PADDLE_PORT``, 0 = any free port) — not serving yet;
2. claim the first free slot ``pserver/slot/<i>`` (``Compare.missing``) under this process's
   lease, publishing ``{"address", "pid"}``; a restarted process takes the slot its dead
   predecessor's lease released (trainers see UNAVAILABLE and retry meanwhile);
3. restore the slot's newest good checkpoint (a restored shard is initialised);
4. start serving, and checkpoint every ``PADDLE_CHECKPOINT_INTERVAL`` seconds if anything changed;
5. on SIGTERM: stop serving, write a final checkpoint, revoke the lease (freeing the slot).
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import uuid

import grpc

from elasticps.config import Config
from elasticps.errors import CheckpointError, ConfigError, LeaseExpiredError, StoreError
from elasticps.proto import pserver_pb2_grpc
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint import ShardCheckpoints
from elasticps.pserver.service import CheckpointNow, ParameterServerServicer
from elasticps.pserver.shard import ShardState
from elasticps.rpc import bind, make_server
from elasticps.rpc.health import add_health, set_serving
from elasticps.store import Compare, Lease, Put, Store, open_store
from elasticps.store.keys import PSERVER_SLOT_PREFIX, PServerSlot, pserver_slot

log = logging.getLogger(__name__)


def claim_slot(
    store: Store, lease: Lease, num_shards: int, value: bytes, stop: threading.Event, job: str
) -> int | None:
    """Take the lowest free slot, waiting for one to free up; None if ``stop`` is set first."""
    announced = False
    while not stop.is_set():
        watch = store.watch_prefix(PSERVER_SLOT_PREFIX, start_revision=store.revision() + 1)
        try:
            for slot in range(num_shards):
                key = pserver_slot(slot)
                if store.txn([Compare.missing(key)], [Put(key, value, lease.id)]).succeeded:
                    return slot
            if not announced:
                log.warning("Job %s: all %d pserver slots are taken; this pserver waits for one "
                            "to free (a dead pserver's slot frees when its lease expires).",
                            job, num_shards)
                announced = True
            watch.get(timeout=1.0)  # any change under pserver/slot/ may have freed one
        finally:
            watch.cancel()
    return None


class PServerProcess:
    """One pserver role process; :meth:`run` blocks until ``stop`` is set."""

    def __init__(self, config: Config, stop: threading.Event | None = None) -> None:
        if not config.store:
            raise ConfigError("the pserver needs PADDLE_STORE (etcd://... or file://...)")
        self.config = config
        self.stop = stop or threading.Event()
        self.incarnation = uuid.uuid4().hex[:12]
        self.num_shards = config.pserver_count
        self.node = f"pserver (job {config.job_name})"
        self.last_checkpoint = ""
        self._saved_version = -1
        self._saving = threading.Lock()  # the periodic loop and Checkpoint RPCs take turns

    def run(self) -> int:
        config = self.config
        assert config.store is not None
        store = open_store(config.store, config.job_name)
        server = make_server(config.token)
        try:
            port = bind(server, config.host, config.port)
            address = f"{config.host}:{port}"
            lease = store.grant_lease(config.lease_ttl)
            lease.keep_alive()
            value = PServerSlot(address).encode()
            slot = claim_slot(store, lease, self.num_shards, value, self.stop, config.job_name)
            if slot is None:
                lease.revoke()
                return 0
            self.node = f"pserver {slot} of {self.num_shards} (job {config.job_name})"
            log.info("%s claimed its slot at %s.", self.node, address)
            state = ShardState(slot, self.num_shards)
            checkpoints = self._restore(state, store, slot)
            checkpoint_now: CheckpointNow | None = None
            if checkpoints is not None:
                checkpoint_now = functools.partial(self._checkpoint_now, state, checkpoints)
            servicer = ParameterServerServicer(
                state, self.incarnation, lambda: self.last_checkpoint, checkpoint_now
            )
            pserver_pb2_grpc.add_ParameterServerServicer_to_server(servicer, server)
            set_serving(add_health(server), True)  # slot claimed and restored: ready
            server.start()
            log.info("%s is serving at %s (initialised: %s).", self.node, address,
                     state.initialized)
            saver = None
            if checkpoints is not None:
                saver = threading.Thread(target=self._checkpoint_loop, args=(state, checkpoints),
                                         name="checkpoint", daemon=True)
                saver.start()
            code = self._watch_lease(store, lease, slot, value)
            self._shutdown(server, state, checkpoints, saver, lease)
            return code
        finally:
            server.stop(grace=None)
            store.close()

    def _restore(self, state: ShardState, store: Store, slot: int) -> ShardCheckpoints | None:
        config = self.config
        if not config.checkpoint_url:
            log.warning("%s has no PADDLE_CHECKPOINT_URL: its shard is lost if it dies.", self.node)
            return None
        checkpoints = ShardCheckpoints(
            config.checkpoint_url, slot, self.num_shards, keep=config.checkpoint_keep,
            store=store, fault=config.fault_inject, node=self.node,
        )
        removed = checkpoints.remove_temp_files()
        if removed:
            log.warning("%s removed %d unfinished checkpoint file(s) of a crashed write.",
                        self.node, removed)
        loaded = checkpoints.load_newest()
        if loaded is None:
            log.info("%s found no checkpoint under %s; it starts empty.", self.node,
                     config.checkpoint_url)
        else:
            snap, manifest = loaded
            state.restore(snap, manifest.id)
            self.last_checkpoint = manifest.id
            log.info("%s restored checkpoint %s (%d applied batches).", self.node, manifest.id,
                     len(snap.applied))
        self._saved_version = state.version
        return checkpoints

    def _checkpoint_loop(self, state: ShardState, checkpoints: ShardCheckpoints) -> None:
        while not self.stop.wait(self.config.checkpoint_interval):
            self._checkpoint(state, checkpoints)

    def _checkpoint(self, state: ShardState, checkpoints: ShardCheckpoints) -> None:
        try:
            self._checkpoint_now(state, checkpoints)
        except CheckpointError as exc:
            log.error("%s could not write a checkpoint: %s; it retries next interval.",
                      self.node, exc)

    def _checkpoint_now(
        self, state: ShardState, checkpoints: ShardCheckpoints
    ) -> tuple[str, AppliedSet]:
        """Checkpoint if anything changed; the id of the checkpoint holding the current state
        and that state's applied set. CheckpointError if it cannot be written."""
        with self._saving:
            with state.lock:
                if state.version == self._saved_version:
                    return self.last_checkpoint, state.applied.copy()
            snap, version = state.snapshot()
            try:
                manifest = checkpoints.save(snap)
            except (OSError, StoreError, ValueError) as exc:
                raise CheckpointError(f"{self.node} could not write a checkpoint: {exc}") from exc
            self._saved_version = version
            self.last_checkpoint = manifest.id
            return manifest.id, snap.applied

    def _watch_lease(self, store: Store, lease: Lease, slot: int, value: bytes) -> int:
        """Block until stop; if our lease expired (a store outage), reclaim the same slot."""
        while not self.stop.wait(0.5):
            if not lease.expired:
                continue
            log.error("%s lost its store lease; it tries to reclaim slot %d.", self.node, slot)
            try:
                lease = store.grant_lease(self.config.lease_ttl)
                lease.keep_alive()
                key = pserver_slot(slot)
                if not store.txn([Compare.missing(key)], [Put(key, value, lease.id)]).succeeded:
                    log.error("%s: slot %d was taken by another pserver; this one exits.",
                              self.node, slot)
                    return 1
                log.info("%s reclaimed slot %d.", self.node, slot)
            except (StoreError, LeaseExpiredError) as exc:
                log.error("%s cannot reach the store yet (%s); it keeps serving and retries.",
                          self.node, exc)
        return 0

    def _shutdown(
        self,
        server: grpc.Server,
        state: ShardState,
        checkpoints: ShardCheckpoints | None,
        saver: threading.Thread | None,
        lease: Lease,
    ) -> None:
        log.info("%s is shutting down.", self.node)
        server.stop(grace=2.0).wait()
        if saver is not None:
            saver.join()
        if checkpoints is not None:
            self._checkpoint(state, checkpoints)
        try:
            lease.revoke()
        except StoreError as exc:
            log.warning("%s could not revoke its lease (%s); the slot frees when it expires.",
                        self.node, exc)


def main(config: Config) -> int:
    """Run the role until SIGTERM/SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return PServerProcess(config, stop).run()
