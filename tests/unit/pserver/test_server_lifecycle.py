"""The pserver's slot lifecycle stepped state by state over an embedded store (a file) and local
checkpoints, with an RPC endpoint that binds nothing: no socket anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from elasticps.config import Config, load_config
from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.server import TRANSITIONS, PServerProcess, PServerState
from elasticps.pserver.service import ParameterServerServicer
from elasticps.pserver.shard import BatchKey
from elasticps.store import Store, open_store
from elasticps.store.keys import PServerSlot, pserver_slot

S = PServerState
SPEC = pserver_pb2.TableSpec(
    name="w", kind=pserver_pb2.TableSpec.DENSE, shape=[3],
    optimizer=pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.SGD, lr=0.1))


class FakeEndpoint:
    """Records what the lifecycle asks of its RPC server."""

    def __init__(self, config: Config) -> None:
        self.address = "fake-host:7"
        self.events: list[str] = []
        self.servicer: ParameterServerServicer | None = None

    def serve(self, servicer: ParameterServerServicer) -> None:
        self.servicer = servicer
        self.events.append("serve")

    def stop(self, grace: float | None) -> None:
        self.events.append(f"stop {grace}")


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


class Harness:
    def __init__(self, tmp_path: Path, store: Store, job_name: str) -> None:
        self.store = store
        self.ckpt_url = f"file://{tmp_path}/ckpt"
        self.config = load_config(env={}, store=f"file://{tmp_path}/job.db", job_name=job_name,
                                  token="t", num_pservers=1, lease_ttl=2,
                                  checkpoint_url=self.ckpt_url, checkpoint_interval=3600.0)
        self.endpoints: list[FakeEndpoint] = []

    def endpoint(self, config: Config, call_metrics: object) -> FakeEndpoint:
        self.endpoints.append(FakeEndpoint(config))
        return self.endpoints[-1]

    def process(self) -> PServerProcess:
        return PServerProcess(self.config, endpoint=self.endpoint, poll_s=0.01)

    def checkpoints(self) -> ShardCheckpoints:
        return ShardCheckpoints(self.ckpt_url, 0, 1)


@pytest.fixture
def harness(tmp_path: Path, store: Store, job_name: str) -> Harness:
    return Harness(tmp_path, store, job_name)


def step_to(proc: PServerProcess, *states: PServerState) -> None:
    for want in states:
        assert proc.step() is want


def test_transition_table_is_closed_and_only_stopped_is_final() -> None:
    assert set(TRANSITIONS) == set(PServerState)
    assert all(target in TRANSITIONS for targets in TRANSITIONS.values() for target in targets)
    assert [s for s in PServerState if s.final] == [S.STOPPED]


def test_claims_restores_serves_and_stops_with_a_final_checkpoint(harness: Harness) -> None:
    proc = harness.process()
    step_to(proc, S.CLAIMING)
    assert harness.store.get(pserver_slot(0)) is None  # the port is bound, no slot yet
    step_to(proc, S.RESTORING)
    slot = harness.store.get(pserver_slot(0))
    assert slot is not None
    assert PServerSlot.decode(slot.value, slot.key).address == "fake-host:7"
    step_to(proc, S.SERVING)
    (endpoint,) = harness.endpoints
    assert endpoint.events == ["serve"]
    step_to(proc, S.SERVING, S.SERVING)

    assert proc.shard is not None
    proc.shard.declare([SPEC])  # a change the final checkpoint must keep
    proc.stop.set()
    step_to(proc, S.STOPPING, S.STOPPED)
    assert proc.exit_code == 0
    assert endpoint.events == ["serve", "stop 2.0", "stop None"]
    assert harness.store.get(pserver_slot(0)) is None  # freed at once
    loaded = harness.checkpoints().load_newest()
    assert loaded is not None
    assert [s.name for s in loaded[0].specs] == ["w"]


def test_after_a_lost_lease_it_reclaims_the_slot_and_a_clean_exit_frees_it_at_once(
        harness: Harness) -> None:
    proc = harness.process()
    step_to(proc, S.CLAIMING, S.RESTORING, S.SERVING)
    first = proc.lease
    assert first is not None
    first.revoke()  # the store dropped the lease (an outage longer than the TTL)
    assert harness.store.get(pserver_slot(0)) is None
    step_to(proc, S.RECLAIMING, S.SERVING)
    slot = harness.store.get(pserver_slot(0))
    assert proc.lease is not None
    assert proc.lease is not first
    assert slot is not None
    assert slot.lease == proc.lease.id

    proc.stop.set()
    step_to(proc, S.STOPPING, S.STOPPED)
    assert proc.exit_code == 0
    assert harness.store.get(pserver_slot(0)) is None  # the new lease was revoked


def test_a_slot_taken_while_the_lease_was_lost_ends_it_without_a_checkpoint(
        harness: Harness) -> None:
    proc = harness.process()
    step_to(proc, S.CLAIMING, S.RESTORING, S.SERVING)
    assert proc.lease is not None
    assert proc.shard is not None
    proc.shard.declare([SPEC])
    proc.lease.revoke()
    successor = harness.process()
    step_to(successor, S.CLAIMING, S.RESTORING, S.SERVING)  # the restarted pserver took it

    step_to(proc, S.RECLAIMING, S.LOST, S.STOPPED)
    assert proc.exit_code == 1
    assert harness.checkpoints().manifests() == []  # the slot's directory is not its own now
    slot = harness.store.get(pserver_slot(0))
    assert slot is not None
    assert successor.lease is not None
    assert slot.lease == successor.lease.id  # the successor keeps its slot
    successor.stop.set()
    assert successor.run() == 0


def _push(proc: PServerProcess, seq: int) -> None:
    assert proc.shard is not None
    proc.shard.push(BatchKey(0, 0, seq), {"w": np.ones(3, dtype=np.float32)}, {})


def _checkpoint(endpoint: FakeEndpoint) -> pserver_pb2.CheckpointResponse:
    """The Checkpoint RPC (as the reconciler calls it), without gRPC's error translation."""
    assert endpoint.servicer is not None
    handler = ParameterServerServicer.Checkpoint.__wrapped__  # type: ignore[attr-defined]
    return handler(endpoint.servicer, pserver_pb2.CheckpointRequest(pass_id=0), None)


def test_a_pserver_that_lost_its_slot_cannot_replace_the_new_owners_checkpoints(
        harness: Harness) -> None:
    """Hole 3: a pserver whose lease expired keeps serving (a stale trainer still pushes to it)
    while a restarted pserver takes its slot over and writes the checkpoint that seals a pass.
    Neither the zombie's periodic checkpoint nor its final one may be published over it: the
    next restore must hold every batch the new owner sealed."""
    zombie = harness.process()
    step_to(zombie, S.CLAIMING, S.RESTORING, S.SERVING)
    assert zombie.shard is not None
    assert zombie.lease is not None
    zombie.shard.declare([SPEC])
    zombie.shard.init_dense({"w": np.zeros(3, dtype=np.float32)})
    _push(zombie, 0)
    _checkpoint(harness.endpoints[0])
    zombie.lease.revoke()  # its lease expired (it was paused, or cut off); it has not noticed
    owner = harness.process()
    step_to(owner, S.CLAIMING, S.RESTORING, S.SERVING)  # restores the zombie's checkpoint
    _push(owner, 1)
    sealing = _checkpoint(harness.endpoints[1])  # e.g. the reconciliation that seals pass 0
    assert [(t.below, list(t.extra)) for t in sealing.tasks] == [(2, [])]

    _push(zombie, 5)  # the zombie applies a stale trainer's push
    with pytest.raises(CheckpointError, match="no longer owns slot 0"):
        _checkpoint(harness.endpoints[0])  # its periodic loop (or a Checkpoint RPC)
    zombie.stop.set()
    step_to(zombie, S.STOPPING, S.STOPPED)  # and its shutdown: no final checkpoint

    published = ShardCheckpoints(harness.ckpt_url, 0, 1, store=harness.store)
    loaded = published.load_newest()
    assert loaded is not None
    snap, manifest = loaded
    assert manifest.id == sealing.checkpoint_id
    assert [(p, t, b, x) for p, t, b, x in snap.applied.tasks()] == [(0, 0, 2, [])]
    assert len(harness.checkpoints().manifests()) == 2  # the zombie's files were deleted
    owner.stop.set()
    assert owner.run() == 0


@pytest.mark.slow
def test_a_pserver_waiting_for_a_free_slot_stops_without_one(harness: Harness) -> None:
    holder = harness.process()
    step_to(holder, S.CLAIMING, S.RESTORING, S.SERVING)
    waiting = harness.process()
    step_to(waiting, S.CLAIMING, S.CLAIMING, S.CLAIMING)  # every slot taken
    waiting.stop.set()
    step_to(waiting, S.STOPPING, S.STOPPED)
    assert waiting.exit_code == 0
    assert harness.endpoints[1].events == ["stop None"]  # it never served
    holder.stop.set()
    assert holder.run() == 0
