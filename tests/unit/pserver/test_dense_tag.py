"""A shard's dense tag: one tag names one dense state, a pull naming the current tag carries no
values, and each push reports the states it went from and to (pserver/dense_tag.py)."""

from __future__ import annotations

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[6], optimizer=OPT(kind=OPT.ADAM, lr=0.1)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=100, optimizer=OPT(kind=OPT.SGD, lr=0.1)),
]
GRAD = np.linspace(-1, 1, 6, dtype=np.float32)
ROWS = (np.array([3, 7], np.int64), np.ones((2, 2), np.float32))


def _shard() -> ShardState:
    shard = ShardState(0, 1)
    shard.declare(SPECS)
    shard.init_dense({"w": np.zeros(6, np.float32)})
    return shard


def test_a_pull_naming_the_current_tag_carries_no_values_and_a_push_moves_the_tag() -> None:
    shard = _shard()
    first = shard.pull_dense_tagged(["w"])
    assert first.values is not None
    assert first.pristine
    again = shard.pull_dense_tagged(["w"], first.tag)
    assert again.values is None
    assert again.tag == first.tag

    result = shard.push(BatchKey(0, 0, 0), {"w": GRAD}, {})
    assert result.dense_before == first.tag
    assert result.dense_after is not None
    assert result.dense_after != first.tag
    moved = shard.pull_dense_tagged(["w"], first.tag)  # the old tag no longer holds
    assert moved.values is not None
    assert moved.tag == result.dense_after
    assert not moved.pristine  # Adam has taken a step: its moments are not the initial ones
    assert not np.array_equal(moved.values["w"], first.values["w"])
    assert shard.pull_dense_tagged(["w"], moved.tag).values is None


def test_what_changes_no_dense_value_keeps_the_tag() -> None:
    shard = _shard()
    tag = shard.dense_tag()
    shard.push(BatchKey(0, 0, 0), {}, {"emb": ROWS})  # sparse only
    assert shard.dense_tag() == tag
    dropped = shard.push(BatchKey(0, 0, 1), {"w": GRAD}, {}, drop=True)
    assert dropped.skipped
    assert dropped.dense_before == dropped.dense_after == tag
    shard.prune_applied(1)
    assert shard.dense_tag() == tag

    applied = shard.push(BatchKey(1, 0, 0), {"w": GRAD}, {})
    duplicate = shard.push(BatchKey(1, 0, 0), {"w": GRAD}, {})
    assert not duplicate.applied
    assert duplicate.dense_before == duplicate.dense_after == applied.dense_after


def test_a_restarted_shard_never_answers_an_old_tag() -> None:
    """A new process restored from a checkpoint draws a new incarnation: a tag the trainer
    knew from before the restart cannot match, even where the counter comes out the same."""
    shard = _shard()
    shard.push(BatchKey(0, 0, 0), {"w": GRAD}, {})
    known = shard.dense_tag()
    snap, _ = shard.snapshot()
    restarted = ShardState(0, 1)
    restarted.restore(snap, "checkpoint")
    restarted.dense_version = known.version  # the worst case: the counters agree
    pulled = restarted.pull_dense_tagged(["w"], known)
    assert pulled.values is not None
    assert pulled.tag != known
    np.testing.assert_array_equal(pulled.values["w"], shard.pull_dense(["w"])["w"])


def test_declaring_and_initialising_change_the_tag() -> None:
    shard = ShardState(0, 1)
    tags = {shard.dense_tag()}
    shard.declare(SPECS)
    tags.add(shard.dense_tag())
    shard.declare(SPECS)  # an identical re-declaration changes nothing
    assert shard.dense_tag() in tags
    shard.init_dense({"w": np.ones(6, np.float32)})
    tags.add(shard.dense_tag())
    assert len(tags) == 3
