"""DenseGroup with one member, against a real embedded store: no process group, each batch
applied once (a repeat is a duplicate, a non-finite one recorded and skipped), and leaving
writes the final dense checkpoint and drops the member key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from elasticps.store.embedded_store import EmbeddedStore
from elasticps.store.keys import HYBRID_MEMBER_PREFIX
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
