"""DenseGroup with one member, against a real embedded store: no process group, each batch
applied once (a repeat is a duplicate, a non-finite one recorded and skipped), and leaving
writes the final dense checkpoint and drops the member key."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import elasticps.trainer.hybrid.group as group_module
from elasticps.errors import ConfigError, StoreUnavailableError
from elasticps.store.embedded_store import EmbeddedStore
from elasticps.store.keys import HYBRID_GROUP, HYBRID_MEMBER_PREFIX
from elasticps.trainer.hybrid.checkpoints import DenseCheckpoints
from elasticps.trainer.hybrid.collectives import LocalCollectives
from elasticps.trainer.hybrid.group import DenseGroup
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.hybrid.rounds import Header, Kind
from elasticps.trainer.optim import SGD
from tests.unit.trainer.hybrid.test_replica import specs


def test_a_lone_member_applies_each_batch_once_without_a_process_group(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", "/job/") as store:
        replica = DenseReplica(specs(SGD(lr=1.0)))
        replica.set_initial({"w": np.zeros((2, 3)), "b": np.zeros(3)})
        checkpoints = DenseCheckpoints(str(tmp_path / "ckpt"), store, "trainer-0")
        group = DenseGroup(store, replica, name="trainer-0", host="127.0.0.1", lease_ttl=5,
                           timeout=10, device=torch.device("cpu"), checkpoints=checkpoints,
                           checkpoint_interval=3600)
        group.start()
        group.wait_ready()
        assert isinstance(group._collectives, LocalCollectives)
        assert [kv.key for kv in store.get_prefix(HYBRID_MEMBER_PREFIX)] == [
            HYBRID_MEMBER_PREFIX + "trainer-0"]
        grads = np.ones(replica.size, np.float32)
        assert group.submit(Header(Kind.BATCH, 0, 1, 0, step=0), grads)
        assert group.values()["b"].tolist() == [-1.0] * 3
        assert not group.submit(Header(Kind.BATCH, 0, 1, 0, step=0), grads)  # a repeat
        assert group.submit(Header(Kind.SKIPPED, 0, 1, 1, step=1), None)
        assert not group.submit(Header(Kind.BATCH, 0, 1, 1, step=1), grads)  # recorded
        assert (replica.step, group.values()["b"].tolist()) == (1, [-1.0] * 3)
        group.leave()
        assert store.get_prefix(HYBRID_MEMBER_PREFIX) == []
        assert checkpoints.newest_key() == (1, 1)  # its final state, written as it left


def _trained(steps: int) -> DenseReplica:
    replica = DenseReplica(specs(SGD(lr=1.0)))
    replica.set_initial({"w": np.zeros((2, 3)), "b": np.zeros(3)})
    replica.adopt(1)
    for step in range(steps):
        replica.apply(np.ones(replica.size, np.float32), step)
    return replica


def _saved(tmp_path: Path, store: EmbeddedStore, steps: int) -> DenseReplica:
    replica = _trained(steps)
    checkpoints = DenseCheckpoints(str(tmp_path / "ckpt"), store, "old")
    assert checkpoints.save(replica, store.put(HYBRID_GROUP, b"{}"))  # a stand-in record
    store.delete(HYBRID_GROUP)
    return replica


def _formed(tmp_path: Path, store: EmbeddedStore, replica: DenseReplica) -> DenseGroup:
    group = DenseGroup(store, replica, name="trainer-1", host="127.0.0.1", lease_ttl=5,
                       timeout=10, device=torch.device("cpu"),
                       checkpoints=DenseCheckpoints(str(tmp_path / "ckpt"), store, "new"))
    group.start()
    group.wait_ready()
    return group


def test_a_group_resumes_the_newest_readable_checkpoint_but_never_goes_back_from_its_own(
        tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", "/job/") as store:
        _saved(tmp_path, store, 3)
        newest = _saved(tmp_path, store, 6)
        fresh = DenseReplica(specs(SGD(lr=1.0)))
        fresh.set_initial({"w": np.zeros((2, 3)), "b": np.zeros(3)})
        group = _formed(tmp_path, store, fresh)
        assert (fresh.step, fresh.values()["b"].tolist()) == (6, newest.values()["b"].tolist())
        group.leave()

        # the step-6 checkpoint's data is damaged: a member holding step 5 keeps its own
        # state rather than fall back to step 3
        for data in (tmp_path / "ckpt" / "hybrid-dense" / "shard-0-of-1").glob(
                "ckpt-00000001000000000006-*.safetensors"):
            data.write_bytes(b"x" * data.stat().st_size)
        own = _trained(5)
        held = own.values()["b"].tolist()
        group = _formed(tmp_path, store, own)
        assert (own.step, own.values()["b"].tolist()) == (5, held)
        group.leave()


class Outage:
    """A real store that refuses every read and write while ``down``, as an unreachable etcd."""

    def __init__(self, store: EmbeddedStore) -> None:
        self.store = store
        self.down = False
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.store, name)
        if name not in ("get", "get_prefix", "put", "txn", "grant_lease"):
            return call

        def refused_while_down(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                raise StoreUnavailableError("the store is down (test)")
            return call(*args, **kwargs)
        return refused_while_down


def test_rounds_go_on_through_a_store_outage_and_a_member_outside_waits_for_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "STORE_RETRY_S", 0.05)
    with EmbeddedStore(tmp_path / "job.db", "/job/") as real:
        store = Outage(real)
        store.down = True  # down from the start: the member waits for it, it does not fail
        replica = _trained(0)
        group = DenseGroup(store, replica, name="trainer-0", host="127.0.0.1",  # type: ignore[arg-type]
                           lease_ttl=5, timeout=10, device=torch.device("cpu"))
        group.start()
        give_up_at = time.monotonic() + 10
        while store.refused < 3:  # several refused attempts, none fatal
            assert time.monotonic() < give_up_at
            time.sleep(0.01)  # polling a counter another thread moves
        formed = group.membership.formed

        def formed_as_the_store_goes_down() -> None:
            formed()
            store.down = True  # before the member reads the store again: the round needs none
        group.membership.formed = formed_as_the_store_goes_down  # type: ignore[method-assign]
        store.down = False
        group.wait_ready()
        assert store.down
        applied: list[bool] = []
        submit = threading.Thread(target=lambda: applied.append(group.submit(
            Header(Kind.BATCH, 0, 1, 0, step=0), np.ones(replica.size, np.float32))),
            daemon=True)
        submit.start()
        submit.join(timeout=10)
        assert applied == [True], "no round while the store was down"
        assert replica.step == 1
        store.down = False
        group.leave()


def test_a_member_outside_a_generation_gives_up_on_a_store_that_stays_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its wait is bounded: after STORE_DEADLINE_S without the store the trainer's
    wait_ready raises, naming the store, instead of waiting forever."""
    monkeypatch.setattr(group_module, "STORE_RETRY_S", 0.05)
    monkeypatch.setattr(group_module, "STORE_DEADLINE_S", 0.5)
    with EmbeddedStore(tmp_path / "job.db", "/job/") as real:
        store = Outage(real)
        store.down = True
        group = DenseGroup(store, _trained(0), name="trainer-0",  # type: ignore[arg-type]
                           host="127.0.0.1", lease_ttl=5, timeout=10,
                           device=torch.device("cpu"))
        group.start()
        with pytest.raises(ConfigError, match=r"could not reach the store for 0\.5s"):
            group.wait_ready()
        assert store.refused >= 3  # it did try again before giving up
        group.leave()
