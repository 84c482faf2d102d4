"""A shard's starting rows (a warm start): taken before its initialisation, ignored after it,
and refused whole when bad (an id twice, NaN, the wrong width, more than max_rows)."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy


def _state() -> ShardState:
    state = ShardState(0, 1)
    state.declare([
        SPEC(name="w", kind=SPEC.DENSE, shape=[2], optimizer=OPT(kind=OPT.SGD, lr=0.1)),
        SPEC(name="emb", kind=SPEC.SPARSE, dim=2, optimizer=OPT(kind=OPT.SGD, lr=0.1),
             policy=POLICY(evict=POLICY.LRU, max_rows=4)),
    ])
    return state


def test_starting_rows_are_held_until_initialisation_and_ignored_after_it() -> None:
    state = _state()
    rows = np.array([[1, 2], [3, 4]], np.float32)
    assert state.init_sparse("emb", np.array([7, 3]), rows) is False
    state.init_dense({"w": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(state.pull_sparse("emb", np.array([3, 7])), rows[::-1])
    assert state.init_sparse("emb", np.array([3]), np.zeros((1, 2), np.float32)) is True
    np.testing.assert_array_equal(state.pull_sparse("emb", np.array([3])), rows[1:])


@pytest.mark.parametrize(("ids", "rows", "match"), [
    ([1, 1], [[0, 0], [1, 1]], "name an id twice"),
    ([1, 2], [[0, np.nan], [1, 1]], "NaN or Inf"),
    ([1], [[0, 0, 0]], "emb"),
    ([1, 2, 3, 4, 5], [[0, 0]] * 5, "do not fit max_rows=4"),
])
def test_bad_starting_rows_are_refused_and_change_nothing(
        ids: list[int], rows: list[list[float]], match: str) -> None:
    state = _state()
    with pytest.raises(InvalidArgumentError, match=match):
        state.init_sparse("emb", np.array(ids), np.array(rows, np.float32))
    assert dict((name, rows) for name, rows, _ in state.stats().tables)["emb"] == 0
