"""The master's leader state machine stepped state by state over an embedded store (a file), with
fake servers and a fake chunk lister: no socket anywhere."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.manifest import ChunkRef
from elasticps.master.leader import TRANSITIONS, Components, Leader, LeaderState
from elasticps.master.options import MasterOptions
from elasticps.master.service import MasterState
from elasticps.proto import pserver_pb2
from elasticps.rpc.credentials import JobCredentials
from elasticps.store import Store, open_store
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MASTER_CANDIDATE_PREFIX,
    MASTER_ELECTION,
    TRAINER_PREFIX,
    MasterAddress,
    TrainerRegistration,
    master_candidate,
    trainer_key,
)
from tests.flaky_store import WatchFailsOnce
from tests.helpers import wait_for

S = LeaderState


def chunks(url: str) -> list[ChunkRef]:
    return [ChunkRef(f"part-{i}.parquet", 0, 10) for i in range(4)]


class FakeParts:
    """Servers that bind nothing; each records when it stops whether the lock was still held."""

    def __init__(self, store: Store, *, rpc_fails: bool = False) -> None:
        self.store = store
        self.rpc_fails = rpc_fails
        self.events: list[str] = []
        self.shard_clients: list[FakeShards] = []

    def _lock_held(self) -> str:
        return "lock held" if self.store.get(MASTER_ELECTION) is not None else "lock free"

    @contextlib.contextmanager
    def rpc(self, state: MasterState) -> Iterator[int]:
        if self.rpc_fails:
            raise OSError("address already in use")
        self.events.append("rpc up")
        try:
            yield 1111
        finally:
            self.events.append(f"rpc down, {self._lock_held()}")

    @contextlib.contextmanager
    def status(self, state: MasterState) -> Iterator[int]:
        self.events.append("status up")
        try:
            yield 2222
        finally:
            self.events.append(f"status down, {self._lock_held()}")

    def shards(self) -> FakeShards:
        client = FakeShards()
        self.shard_clients.append(client)
        return client

    def components(self) -> Components:
        return Components(rpc=self.rpc, status=self.status, shards=self.shards)


class FakeShards:
    def __init__(self) -> None:
        self.closed = False

    def checkpoint(self, pass_id: int) -> list[pserver_pb2.CheckpointResponse]:
        return []

    def prune_applied(self, upto_pass: int) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def make_leader(store: Store, node: str, parts: FakeParts, **options: object) -> Leader:
    given: dict[str, object] = {"dataset": "mem://data", "batch_plan": BatchPlan(10),
                                **options}
    opts = MasterOptions(job="test", credentials=JobCredentials("test", "t"), lease_ttl=2,
                         node=node,
                         **given)  # type: ignore[arg-type]
    return Leader(store, opts, chunks, parts.components(), poll_s=0.01, campaign_s=0.05)


def step_to(leader: Leader, *states: LeaderState) -> None:
    for want in states:
        assert leader.step() is want


def test_transition_table_is_closed_and_only_stopped_is_final() -> None:
    assert set(TRANSITIONS) == set(LeaderState)
    assert all(target in TRANSITIONS for targets in TRANSITIONS.values() for target in targets)
    assert [s for s in LeaderState if s.final] == [S.STOPPED]
    assert TRANSITIONS[S.STOPPED] == frozenset()


def test_a_leader_campaigns_loads_serves_and_resigns_state_by_state(store: Store) -> None:
    parts = FakeParts(store)
    leader = make_leader(store, "m1", parts)
    assert leader.state is S.STARTING
    assert store.get_prefix(MASTER_CANDIDATE_PREFIX) == []  # constructing does nothing

    step_to(leader, S.CAMPAIGNING)
    candidate = store.get(master_candidate("m1"))
    assert candidate is not None
    assert json.loads(candidate.value)["pid"] > 0
    assert store.get(MASTER_ELECTION) is None

    step_to(leader, S.LOADING)
    election = store.get(MASTER_ELECTION)
    assert election is not None
    assert election.value == b"m1"
    assert not leader.serving.is_set()
    assert parts.events == []

    step_to(leader, S.SERVING)
    assert leader.serving.is_set()
    assert parts.events == ["status up", "rpc up"]
    assert leader.master_state is not None
    assert leader.master_state.queue is not None
    assert leader.master_state.queue.num_tasks == 4  # the dataset it was given
    kv = store.get(MASTER_ADDRESS)
    assert kv is not None
    address = MasterAddress.decode(kv.value)
    assert (address.grpc, address.http, address.node) == ("127.0.0.1:1111", "127.0.0.1:2222",
                                                          "m1")
    assert kv.lease == election.lease  # the address vanishes with the leader

    step_to(leader, S.SERVING, S.SERVING)  # nothing happens: it keeps serving
    leader.stop()
    step_to(leader, S.RESIGNING, S.STOPPED)
    assert leader.exit_code == 0
    assert not leader.serving.is_set()
    # It stopped serving while it still held the lock, and only then gave the lock up.
    assert parts.events[2:] == ["rpc down, lock held", "status down, lock held"]
    assert store.get(MASTER_ELECTION) is None
    assert store.get(MASTER_ADDRESS) is None
    assert store.get_prefix(MASTER_CANDIDATE_PREFIX) == []
    assert leader.step() is S.STOPPED  # final: stepping again changes nothing


def test_a_trainer_watch_that_failed_is_recreated_and_still_releases_a_dead_trainers_task(
        store: Store) -> None:
    """Hole 6: the trainer watch used to die with its first failure, so a trainer's death
    afterwards held its task for the whole task lease. Now the watch is re-created from a fresh
    listing: the trainer is seen, and its death releases its task at once."""
    flaky = WatchFailsOnce(store, TRAINER_PREFIX)
    leader = make_leader(flaky, "m1", FakeParts(store))  # type: ignore[arg-type]
    step_to(leader, S.CAMPAIGNING, S.LOADING, S.SERVING)
    state = leader.master_state
    assert state is not None
    assert state.queue is not None
    lease = store.grant_lease(30)
    store.put(trainer_key("t1"), TrainerRegistration().encode(), lease.id)
    wait_for(lambda: "t1" in state.live_trainers, 10, "the master to see the trainer")
    assert flaky.failed == 1
    with state.lock:
        result, delta = state.queue.get_task("t1", 0, state.clock())
        state.persist(delta)
    assert result.task is not None
    lease.revoke()  # the trainer died: its key vanishes with its lease
    wait_for(lambda: state.queue is not None and not state.queue.pending_of("t1"), 10,
             "the dead trainer's task to go back to todo")
    assert state.queue.task_record(result.task.task_id).failures == 1
    leader.stop()
    step_to(leader, S.RESIGNING, S.STOPPED)


@pytest.mark.slow
def test_a_standby_takes_over_when_the_leader_resigns_and_resumes_its_queue(
        store: Store) -> None:
    first_parts, second_parts = FakeParts(store), FakeParts(store)
    first = make_leader(store, "m1", first_parts)
    second = make_leader(store, "m2", second_parts, dataset=None)  # nothing of its own to set
    step_to(first, S.CAMPAIGNING, S.LOADING, S.SERVING)
    step_to(second, S.CAMPAIGNING, S.CAMPAIGNING, S.CAMPAIGNING)  # blocked in the election
    assert {kv.key for kv in store.get_prefix(MASTER_CANDIDATE_PREFIX)} == {
        master_candidate("m1"), master_candidate("m2")}

    first.stop()
    step_to(first, S.RESIGNING, S.STOPPED)
    step_to(second, S.LOADING, S.SERVING)
    assert second.master_state is not None
    assert second.master_state.queue is not None
    assert second.master_state.queue.num_tasks == 4  # loaded from the store, not set anew
    address = store.get(MASTER_ADDRESS)
    assert address is not None
    assert MasterAddress.decode(address.value).node == "m2"
    second.stop()
    assert second.run() == 0


def test_stop_while_campaigning_leaves_without_having_led(store: Store) -> None:
    leader_parts, standby_parts = FakeParts(store), FakeParts(store)
    leader = make_leader(store, "m1", leader_parts)
    standby = make_leader(store, "m2", standby_parts)
    step_to(leader, S.CAMPAIGNING, S.LOADING, S.SERVING)
    step_to(standby, S.CAMPAIGNING, S.CAMPAIGNING)
    standby.stop()
    step_to(standby, S.RESIGNING, S.STOPPED)
    assert standby.exit_code == 0
    assert standby_parts.events == []  # it never started a server
    assert store.get(master_candidate("m2")) is None
    election = store.get(MASTER_ELECTION)
    assert election is not None
    assert election.value == b"m1"
    leader.stop()
    assert leader.run() == 0


def test_a_leader_whose_lease_is_gone_is_deposed_and_writes_nothing_more(store: Store) -> None:
    parts, new_parts = FakeParts(store), FakeParts(store)
    leader = make_leader(store, "m1", parts)
    step_to(leader, S.CAMPAIGNING, S.LOADING, S.SERVING)
    leader.election.lease.revoke()  # as if its keepalives had stopped reaching the store
    newcomer = make_leader(store, "m2", new_parts)
    step_to(newcomer, S.CAMPAIGNING, S.LOADING, S.SERVING)

    step_to(leader, S.DEPOSED)
    assert leader.master_state is not None
    assert leader.master_state.deposed.is_set()
    step_to(leader, S.STOPPED)
    assert leader.exit_code == 1
    assert parts.events == ["status up", "rpc up", "rpc down, lock held",
                            "status down, lock held"]
    election = store.get(MASTER_ELECTION)
    assert election is not None
    assert election.value == b"m2"
    assert store.get(master_candidate("m1")) is None  # its candidacy ends with it
    newcomer.stop()
    assert newcomer.run() == 0


def test_a_lock_taken_while_loading_deposes_and_stops_what_had_started(store: Store) -> None:
    parts = FakeParts(store)
    # No dataset to set: loading writes nothing before it publishes the address.
    leader = make_leader(store, "m1", parts, num_pservers=2, dataset=None)
    step_to(leader, S.CAMPAIGNING, S.LOADING)
    # Before it publishes its address, its lease goes and another master wins the lock.
    leader.election.lease.revoke()
    newcomer = make_leader(store, "m2", FakeParts(store))
    step_to(newcomer, S.CAMPAIGNING, S.LOADING)

    step_to(leader, S.DEPOSED)  # the fenced write of master/address was refused
    assert parts.events == ["status up", "rpc up"]
    step_to(leader, S.STOPPED)
    assert leader.exit_code == 1
    assert parts.events[2:] == ["rpc down, lock held", "status down, lock held"]
    assert [c.closed for c in parts.shard_clients] == [True]  # the reconcile loop's client
    assert not leader.serving.is_set()
    newcomer.close()


def test_a_server_that_fails_to_start_stops_the_others_and_propagates(store: Store) -> None:
    parts = FakeParts(store, rpc_fails=True)
    leader = make_leader(store, "m1", parts, num_pservers=1)
    with pytest.raises(OSError, match="address already in use"):
        leader.run()
    assert leader.state is S.LOADING
    assert leader.exit_code is None
    assert parts.events == ["status up", "status down, lock held"]
    assert [c.closed for c in parts.shard_clients] == [True]
    assert store.get(master_candidate("m1")) is None
    assert store.get(MASTER_ADDRESS) is None


def test_a_standby_stopped_with_the_job_never_takes_the_lead_it_wins(store: Store) -> None:
    """At a job's end every master is told to stop at once; the leader resigns, and the
    standby that then wins the election must not load the job, serve it and save its page
    as the job's new master (a failover that never was)."""
    leader_parts, standby_parts = FakeParts(store), FakeParts(store)
    leader = make_leader(store, "m1", leader_parts)
    standby = make_leader(store, "m2", standby_parts)
    step_to(leader, S.CAMPAIGNING, S.LOADING, S.SERVING)
    step_to(standby, S.CAMPAIGNING, S.CAMPAIGNING)
    leader.stop()
    standby.stop()
    step_to(leader, S.RESIGNING, S.STOPPED)
    step_to(standby, S.RESIGNING, S.STOPPED)  # it wins the free lock, and gives it up
    assert standby.exit_code == 0
    assert standby.master_state is None
    assert standby_parts.events == []  # it never served
    assert store.get(MASTER_ELECTION) is None
    assert store.get(MASTER_ADDRESS) is None
