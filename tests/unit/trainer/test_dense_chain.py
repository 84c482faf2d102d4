"""The trainer skips a dense pull only while its own updates are the only ones applied: then its
copy equals the shards' values bit for bit; anything else (another trainer, a duplicate, a
restarted shard, a late start) costs pulls from then on, never a stale value."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from elasticps.proto import pserver_pb2
from elasticps.pserver.dense_tag import DenseTag, TaggedDense
from elasticps.pserver.shard import BatchKey, PushResult, ShardState
from elasticps.trainer.dense_chain import DenseChain
from elasticps.trainer.own_update import OwnDenseUpdate

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=[4, 5],
                             optimizer=OPT(kind=OPT.ADAM, lr=1e-2, clip_norm=2.0))
SHARDS = 3


class InProcessShards:
    """What PServerClient does with dense tables, over in-process shards: split, route, join."""

    def __init__(self, shards: list[ShardState]) -> None:
        self.shards = shards
        self.pulls = 0

    def _parts(self, flat: np.ndarray) -> list[np.ndarray]:
        return np.array_split(flat, len(self.shards))

    def pull_dense_tagged(self, names: Sequence[str] | None = None,
                          if_changed: Sequence[DenseTag] | None = None) -> TaggedDense:
        self.pulls += 1
        asks = (list(if_changed) if if_changed is not None and len(if_changed) == len(self.shards)
                else [None] * len(self.shards))
        pulls = [s.pull_dense_tagged(["w"], tag) for s, tag in zip(self.shards, asks, strict=True)]
        if any(p.values is None for p in pulls) and not all(p.values is None for p in pulls):
            pulls = [s.pull_dense_tagged(["w"]) for s in self.shards]
        tags = tuple(p.tag for p in pulls)
        pristine = all(p.pristine for p in pulls)
        if all(p.values is None for p in pulls):
            return TaggedDense(None, tags, pristine)
        joined = np.concatenate([p.values["w"] for p in pulls if p.values is not None])
        return TaggedDense({"w": joined.reshape(4, 5)}, tags, pristine)

    def push(self, seq: int, grad: np.ndarray, drop: bool = False
             ) -> list[pserver_pb2.PushResponse]:
        parts = self._parts(grad.reshape(-1))
        return [_response(s.push(BatchKey(0, 0, seq), {"w": part}, {}, drop=drop))
                for s, part in zip(self.shards, parts, strict=True)]

    def values(self) -> np.ndarray:
        return np.concatenate([s.pull_dense(["w"])["w"] for s in self.shards]).reshape(4, 5)


def _response(result: PushResult) -> pserver_pb2.PushResponse:
    response = pserver_pb2.PushResponse(applied=result.applied, skipped=result.skipped)
    assert result.dense_before is not None
    assert result.dense_after is not None
    response.dense_before.CopyFrom(result.dense_before.to_proto())
    response.dense_after.CopyFrom(result.dense_after.to_proto())
    return response


def _shards(values: np.ndarray) -> list[ShardState]:
    shards = []
    for i, part in enumerate(np.array_split(values.reshape(-1), SHARDS)):
        shard = ShardState(i, SHARDS)
        shard.declare([SPEC])
        shard.init_dense({"w": part})
        shards.append(shard)
    return shards


class Trainer:
    """The step runner's dense bookkeeping: pull, compute a gradient, own update, push."""

    def __init__(self, client: InProcessShards, seed: int) -> None:
        self.client = client
        self.replica = OwnDenseUpdate([SPEC], SHARDS)
        self.chain = DenseChain(client, ["w"])  # type: ignore[arg-type]
        self.rng = np.random.default_rng(seed)

    def step(self, seq: int, drop: bool = False) -> np.ndarray:
        """One batch: returns the values it ran on (what the trainer pulled)."""
        values = self.chain.pull(self.replica.fresh)["w"]
        grad = self.rng.normal(size=(4, 5)).astype(np.float32)
        after = None if drop else self.replica.step({"w": values}, {"w": grad})
        self.chain.pushed(self.client.push(seq, grad, drop=drop), after)
        return np.array(values)


def test_one_trainer_skips_every_pull_after_the_first_and_holds_the_shards_values() -> None:
    start = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    client = InProcessShards(_shards(start))
    trainer = Trainer(client, seed=1)
    for seq in range(12):
        ran_on = trainer.step(seq, drop=seq == 5)  # a dropped batch changes nothing
        if seq == 0:
            np.testing.assert_array_equal(ran_on, start)
    assert trainer.chain.skipped == 11
    assert trainer.chain.live
    # What a skipped pull hands out is what the shards hold, bit for bit.
    np.testing.assert_array_equal(trainer.chain.pull(trainer.replica.fresh)["w"], client.values())


def test_another_trainers_push_ends_the_chain_and_the_pull_brings_its_change() -> None:
    client = InProcessShards(_shards(np.zeros((4, 5), np.float32)))
    mine = Trainer(client, seed=1)
    mine.step(0)
    mine.step(1)
    assert mine.chain.skipped == 1
    client.push(100, np.ones((4, 5), np.float32))  # another trainer's batch
    pulled = mine.chain.pull(mine.replica.fresh)["w"]
    np.testing.assert_array_equal(pulled, client.values())
    assert not mine.chain.live
    skipped = mine.chain.skipped
    for seq in range(2, 6):  # from now on every pull reads the shards
        mine.step(seq)
    assert mine.chain.skipped == skipped


def test_a_duplicate_answer_ends_the_chain() -> None:
    """The shard had applied the batch (a retry after a lost answer): it did not step now, while
    the replica did, so the replica no longer matches it."""
    client = InProcessShards(_shards(np.zeros((4, 5), np.float32)))
    trainer = Trainer(client, seed=2)
    trainer.step(0)
    values = trainer.chain.pull(trainer.replica.fresh)["w"]
    grad = np.ones((4, 5), np.float32)
    client.push(1, grad)  # applied; say its answer was lost
    trainer.chain.pushed(client.push(1, grad), trainer.replica.step({"w": values}, {"w": grad}))
    assert not trainer.chain.live
    np.testing.assert_array_equal(trainer.chain.pull(trainer.replica.fresh)["w"],
                                  client.values())


@pytest.mark.parametrize("how", ["late trainer", "restarted shard"])
def test_no_chain_without_a_pristine_start_or_across_a_restart(how: str) -> None:
    client = InProcessShards(_shards(np.zeros((4, 5), np.float32)))
    first = Trainer(client, seed=3)
    first.step(0)
    if how == "late trainer":  # joins after a step was taken: its replica starts at zero state
        second = Trainer(client, seed=4)
        second.step(1)
        second.step(2)
        assert second.chain.skipped == 0
        assert not second.chain.live
        return
    snap, _ = client.shards[1].snapshot()
    client.shards[1] = ShardState(1, SHARDS)  # the process restarted and restored
    client.shards[1].restore(snap, "checkpoint")
    pulled = first.chain.pull(first.replica.fresh)["w"]
    np.testing.assert_array_equal(pulled, client.values())
    assert not first.chain.live
    assert first.chain.skipped == 0
