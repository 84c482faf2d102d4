"""The trainer's replica of the pservers' dense update: the same values as the pservers' shards
(the real DenseShard code), bit for bit, whatever the optimizer, clipping and sharding; and
the rule that combines it with a pull."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.proto import pserver_pb2
from elasticps.pserver.dense_table import DenseShard
from elasticps.trainer import optim
from elasticps.trainer.own_update import OwnDenseUpdate, corrected

OPT = pserver_pb2.OptimizerSpec
SHAPE = [7, 5]  # 35 values: 3 shards of 12, 12 and 11


@pytest.mark.parametrize("optimizer", [
    OPT(kind=OPT.ADAM, lr=1e-2, weight_decay=0.01, clip_norm=0.5),
    OPT(kind=OPT.ADAGRAD, lr=0.1, initial_accumulator=0.1),
    OPT(kind=OPT.MOMENTUM, lr=0.05),
    OPT(kind=OPT.SGD, lr=0.3, clip_norm=0.2),
    optim.AdamW(lr=1e-2, schedule=optim.Cosine(total_steps=8, warmup_steps=3)).to_proto(),
], ids=["adam", "adagrad", "momentum", "sgd", "adamw-scheduled"])
@pytest.mark.parametrize("num_shards", [1, 3])
def test_the_replica_matches_the_pserver_shards_bit_for_bit(optimizer: OPT,
                                                            num_shards: int) -> None:
    spec = pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=SHAPE,
                                 optimizer=optimizer)
    shards = [DenseShard(spec, i, num_shards) for i in range(num_shards)]
    rng = np.random.default_rng(3)
    values = rng.normal(size=SHAPE).astype(np.float32)
    for shard in shards:
        shard.values = values.reshape(-1)[shard.start:shard.stop].copy()
    replica = OwnDenseUpdate([spec], num_shards)
    for batch_step in range(4, 10):  # a schedule reads the batch's number
        grad = rng.normal(size=SHAPE).astype(np.float32)
        mine = replica.step({"w": values}, {"w": grad}, batch_step)["w"]
        for shard in shards:
            shard.commit(shard.compute(grad.reshape(-1)[shard.start:shard.stop], batch_step))
        theirs = np.concatenate([shard.values for shard in shards]).reshape(SHAPE)
        np.testing.assert_array_equal(mine, theirs)
        assert not np.array_equal(mine, values)  # it moved
        values = theirs


def test_a_pull_equal_to_what_the_batch_ran_on_takes_the_replica_else_adds_the_step() -> None:
    ran_on = {"w": np.array([1.0, 2.0], np.float32)}
    after = {"w": np.array([0.5, 2.5], np.float32)}
    np.testing.assert_array_equal(corrected({"w": ran_on["w"].copy()}, ran_on, after)["w"],
                                  after["w"])
    # Another trainer's push moved the pull by +1: keep it, plus this trainer's own step.
    moved = {"w": np.array([2.0, 3.0], np.float32)}
    np.testing.assert_array_equal(corrected(moved, ran_on, after)["w"], [1.5, 3.5])
    # A table the replica did not update is taken as pulled.
    other = {"v": np.array([9.0], np.float32)}
    assert corrected(other, ran_on, after)["v"] is other["v"]


def test_a_skipped_pull_handing_back_the_arrays_the_batch_ran_on_takes_the_replica_as_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense chain answers a skipped pull with the very arrays the last batch ran on: no
    comparison of the values (a 1.7 MB scan per step on the CTR model), no copy of the result."""
    ran_on = {"w": np.array([[1.0, 2.0]], np.float32)}
    after = {"w": np.array([[0.5, 2.5]], np.float32)}

    def no_scan(*args: object) -> bool:
        raise AssertionError("the values were compared although they were the same arrays")

    monkeypatch.setattr(np, "array_equal", no_scan)
    assert corrected(dict(ran_on), ran_on, after)["w"] is after["w"]
