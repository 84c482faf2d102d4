"""DenseCheckpoints: the replica's state saved under its key, published only while the writer's
generation is the store's current one, and restored whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elasticps.store.embedded_store import EmbeddedStore
from elasticps.store.keys import HYBRID_CHECKPOINT_PREFIX, HYBRID_GROUP, PSERVER_CHECKPOINT_PREFIX
from elasticps.trainer.hybrid.checkpoints import DenseCheckpoints
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.optim import Adam
from tests.unit.trainer.hybrid.test_replica import specs, trained


def test_a_checkpoint_is_published_under_the_current_generation_and_restores_the_state(
        tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", "/job/") as store:
        revision = store.put(HYBRID_GROUP, b"{}")
        checkpoints = DenseCheckpoints(str(tmp_path / "ckpt"), store, "trainer-0")
        replica = trained(Adam(lr=0.01))
        replica.adopt(7)
        assert checkpoints.newest_key() is None
        assert checkpoints.save(replica, revision)
        assert [kv.key for kv in store.get_prefix(HYBRID_CHECKPOINT_PREFIX)] == [
            HYBRID_CHECKPOINT_PREFIX + "00000007000000000003"]
        assert store.get_prefix(PSERVER_CHECKPOINT_PREFIX) == []
        assert checkpoints.newest_key() == (7, 3)

        fresh = DenseReplica(specs(Adam(lr=0.01)))
        assert DenseCheckpoints(str(tmp_path / "ckpt"), store, "t1").restore_newest(fresh) == (
            7, 3)
        assert fresh.pack()[1].tobytes() == replica.pack()[1].tobytes()
        assert fresh.applied.contains(0, 2, 0)

        # the generation moved on: a member of the old one publishes nothing
        store.put(HYBRID_GROUP, b"{}")
        replica.apply(np.ones(replica.size, np.float32), 4)
        assert not checkpoints.save(replica, revision)
        assert checkpoints.newest_key() == (7, 3)
