"""A hybrid shard holds sparse rows only: the trainers hold the dense parameters."""

from __future__ import annotations

import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
DENSE = SPEC(name="w", kind=SPEC.DENSE, shape=[3], optimizer=OPT(kind=OPT.SGD, lr=0.5))
SPARSE = SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=100,
              optimizer=OPT(kind=OPT.SGD, lr=0.5))


def test_a_hybrid_shard_refuses_a_dense_table_and_declares_nothing_of_that_declaration() -> None:
    shard = ShardState(0, 1, mode="hybrid")
    with pytest.raises(InvalidArgumentError, match=r"hybrid mode.*'w'.*PADDLE_TRAINING_MODE"):
        shard.declare([SPARSE, DENSE])
    assert shard.tables == {}
    shard.declare([SPARSE])
    assert list(shard.tables) == ["emb"]


def test_other_modes_still_hold_dense_tables() -> None:
    shard = ShardState(0, 1, mode="async")
    shard.declare([SPARSE, DENSE])
    assert sorted(shard.tables) == ["emb", "w"]
