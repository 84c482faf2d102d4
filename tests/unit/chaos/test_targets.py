"""Targets come from the job's own store records: only this host's pids, never one twice."""

from __future__ import annotations

import pytest

from elasticps.chaos.targets import (
    PublishedProcesses,
    Target,
    decode_processes,
    serving_again,
    standby_ready,
    targets_of,
)
from elasticps.store.api import KeyValue
from elasticps.store.keys import (
    MASTER_ADDRESS,
    MasterAddress,
    ProcessInfo,
    PServerSlot,
    TrainerRegistration,
    master_candidate,
    pserver_slot,
    trainer_key,
)

HERE, THERE = "node-a", "node-b"


def kv(key: str, value: bytes) -> KeyValue:
    return KeyValue(key, value, create_revision=1, mod_revision=1, version=1, lease=0)


def leader(node: str = "master-node-a-10", pid: int = 10, host: str = HERE) -> MasterAddress:
    return MasterAddress("127.0.0.1:1", "127.0.0.1:2", node, pid, host)


def procs(**overrides: object) -> PublishedProcesses:
    base: dict[str, object] = {
        "leader": leader(),
        "candidates": {"master-node-a-10": ProcessInfo(10, HERE),
                       "master-node-a-11": ProcessInfo(11, HERE)},
        "slots": {0: PServerSlot("127.0.0.1:3", 20, HERE), 1: PServerSlot("127.0.0.1:4", 21, HERE)},
        "trainers": {"trainer-0-a-30": TrainerRegistration(30, HERE),
                     "trainer-1-a-31": TrainerRegistration(31, HERE)},
    }
    base.update(overrides)
    return PublishedProcesses(**base)  # type: ignore[arg-type]


def test_the_processes_decode_from_every_role_record_skipping_what_does_not_parse() -> None:
    decoded = decode_processes(
        kv(MASTER_ADDRESS, leader().encode()),
        [kv(master_candidate("master-node-a-10"), ProcessInfo(10, HERE).encode()),
         kv(master_candidate("master-node-a-11"), b"not json")],
        [kv(pserver_slot(0), PServerSlot("127.0.0.1:3", 20, HERE).encode()),
         kv(pserver_slot(1), b'{"address": "x", "pid": "21", "host": "node-a"}'),  # pid: str
         kv("pserver/slot/x", PServerSlot("127.0.0.1:5", 22, HERE).encode())],  # no slot number
        [kv(trainer_key("t0"), TrainerRegistration(30, HERE).encode()),
         kv(trainer_key("t1"), TrainerRegistration(31, HERE, leaving=True).encode()),
         kv(trainer_key("t2"), b"[]")])
    assert decoded.leader == leader()
    assert dict(decoded.candidates) == {"master-node-a-10": ProcessInfo(10, HERE)}
    assert dict(decoded.slots) == {0: PServerSlot("127.0.0.1:3", 20, HERE)}
    assert dict(decoded.trainers) == {"t0": TrainerRegistration(30, HERE),
                                      "t1": TrainerRegistration(31, HERE, leaving=True)}
    assert decode_processes(kv(MASTER_ADDRESS, b"{}"), [], [], []).leader is None


def test_only_the_leader_is_a_master_target_and_only_this_hosts_pids_are_targets() -> None:
    assert targets_of(procs(), "master", HERE) == [Target("master", 10, "master-node-a-10")]
    assert targets_of(procs(), "pserver", HERE) == [Target("pserver", 20, "0"),
                                                    Target("pserver", 21, "1")]
    assert targets_of(procs(), "trainer", HERE) == [Target("trainer", 30, "trainer-0-a-30"),
                                                    Target("trainer", 31, "trainer-1-a-31")]
    # The same job seen from another machine: none of these pids is ours to signal.
    for role in ("master", "pserver", "trainer"):
        assert targets_of(procs(), role, THERE) == []
    mixed = procs(slots={0: PServerSlot("a", 20, THERE), 1: PServerSlot("b", 21, HERE)},
                  leader=leader(host=THERE))
    assert targets_of(mixed, "pserver", HERE) == [Target("pserver", 21, "1")]
    assert targets_of(mixed, "master", HERE) == []
    assert targets_of(procs(leader=None), "master", HERE) == []
    with pytest.raises(ValueError, match="unknown role"):
        targets_of(procs(), "etcd", HERE)


def test_killed_pids_and_leaving_trainers_are_never_targets() -> None:
    # A killed process's record outlives it by up to the lease TTL; its pid may be reused.
    assert targets_of(procs(), "pserver", HERE, spent={20}) == [Target("pserver", 21, "1")]
    assert targets_of(procs(), "master", HERE, spent={10}) == []
    leaving = procs(trainers={"t0": TrainerRegistration(30, HERE, leaving=True),
                              "t1": TrainerRegistration(31, HERE)})
    assert targets_of(leaving, "trainer", HERE) == [Target("trainer", 31, "t1")]
    assert leaving.active_trainers() == {"t1"}
    assert leaving.active_trainers(spent={31}) == set()


def test_a_standby_is_ready_when_another_live_master_is_in_the_election() -> None:
    assert standby_ready(procs())
    alone = procs(candidates={"master-node-a-10": ProcessInfo(10, HERE)})
    assert not standby_ready(alone)
    # The only other candidate is a master we killed (its record lingers until its lease ends).
    assert not standby_ready(procs(), spent={11})
    assert not standby_ready(procs(leader=None))
    # A standby on another machine still takes over: the election is the job's, not the host's.
    assert standby_ready(procs(candidates={"master-node-b-5": ProcessInfo(5, THERE)}))


def test_serving_again_means_a_new_leader_a_reclaimed_slot_or_a_new_trainer() -> None:
    before = procs()
    master = Target("master", 10, "master-node-a-10")
    assert not serving_again(master, before, procs(leader=None))
    assert not serving_again(master, before, before)
    assert serving_again(master, before, procs(leader=leader("master-node-a-11", 11)))

    pserver = Target("pserver", 21, "1")
    assert not serving_again(pserver, before, before)
    assert not serving_again(pserver, before, procs(slots={0: before.slots[0]}))
    assert serving_again(pserver, before, procs(slots={**before.slots,
                                                       1: PServerSlot("c", 40, HERE)}))

    trainer = Target("trainer", 30, "trainer-0-a-30")
    assert not serving_again(trainer, before, before)
    assert not serving_again(trainer, before, procs(trainers={
        "trainer-1-a-31": before.trainers["trainer-1-a-31"]}))
    assert serving_again(trainer, before, procs(trainers={
        **before.trainers, "trainer-0-a-41": TrainerRegistration(41, HERE)}))
