"""Geo mode on one shard and one trainer's local copy, without sockets: deltas are added once
under the window's BatchRefs, a window overlapping applied batches changes nothing, modes do not
mix, and GeoParams pushes exactly the local training's change."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.trainer import optim
from elasticps.trainer.geo import GeoParams

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[3], optimizer=OPT(kind=OPT.SGD, lr=0.5)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=100, optimizer=OPT(kind=OPT.SGD, lr=0.5),
         initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.UNIFORM, scale=0.1,
                                             seed=4)),
]
W0 = np.array([1.0, 2.0, 3.0], np.float32)


def _shard(mode: str = "geo") -> ShardState:
    shard = ShardState(0, 1, mode=mode)
    shard.declare(SPECS)
    shard.init_dense({"w": W0})
    return shard


def _keys(*seqs: int) -> list[BatchKey]:
    return [BatchKey(0, 7, s) for s in seqs]


def test_a_delta_is_added_once_and_records_every_batch_it_covers() -> None:
    shard = _shard()
    ids = np.array([5, 9], np.int64)
    start = shard.pull_sparse("emb", ids)
    delta = np.full((2, 2), 0.25, np.float32)
    result = shard.push_delta(_keys(0, 1, 2), {"w": np.ones(3, np.float32)},
                              {"emb": (ids, delta)})
    assert result.applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 + 1)  # added, no optimizer
    np.testing.assert_allclose(shard.pull_sparse("emb", ids), start + 0.25)
    assert shard.applied.applications(0, 7) == 3
    # The same window again (a retry) is a duplicate; one overlapping it is refused whole,
    # recording nothing: seq 3 is left for the master to hand out again.
    again = shard.push_delta(_keys(0, 1, 2), {"w": np.ones(3, np.float32)}, {})
    assert (again.applied, again.partly_applied) == (False, False)
    overlap = shard.push_delta(_keys(2, 3), {"w": np.ones(3, np.float32)}, {})
    assert (overlap.applied, overlap.partly_applied) == (False, True)
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 + 1)
    assert not shard.applied.contains(0, 7, 3)
    assert (shard.stats().duplicates, shard.windows_refused_partly_applied) == (1, 1)


def test_modes_do_not_mix_and_bad_windows_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="async mode"):
        _shard("async").push_delta(_keys(0), {"w": np.ones(3, np.float32)}, {})
    geo = _shard()
    with pytest.raises(InvalidArgumentError, match="geo mode"):
        geo.push(BatchKey(0, 0, 0), {"w": np.ones(3, np.float32)}, {})
    with pytest.raises(InvalidArgumentError, match="twice"):
        geo.push_delta(_keys(1, 1), {"w": np.ones(3, np.float32)}, {})
    with pytest.raises(InvalidArgumentError, match="must name"):
        geo.push_delta([], {}, {})
    assert len(geo.applied) == 0
    np.testing.assert_array_equal(geo.pull_dense(["w"])["w"], W0)


class _OneShard:
    """The PServerClient calls GeoParams makes, on an in-process shard."""

    num_shards = 1

    def __init__(self, shard: ShardState) -> None:
        self.shard = shard
        self.pulls = 0

    def specs(self) -> dict[str, pserver_pb2.TableSpec]:
        return {s.name: s for s in self.shard.specs()}

    def pull_dense(self, names: list[str] | None) -> dict[str, np.ndarray]:
        self.pulls += 1
        return self.shard.pull_dense(names or [])

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        return self.shard.pull_sparse(table, ids)

    def push_delta(self, refs: list[common_pb2.BatchRef], dense: Mapping[str, np.ndarray],
                   sparse: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        keys = [BatchKey(r.pass_id, r.task_id, r.seq) for r in refs]
        assert self.shard.push_delta(keys, dense, sparse).applied


def test_geo_params_train_locally_and_push_the_change_every_k_steps() -> None:
    shard = _shard()
    client = _OneShard(shard)
    geo = GeoParams(client, steps=2)
    ids = np.array([3, 4], np.int64)
    start_rows = shard.pull_sparse("emb", np.array([3, 4, 8]))
    for seq in range(2):
        w = geo.pull_dense(["w"])["w"]
        np.testing.assert_allclose(w, W0 - 0.5 * seq)  # the local copy, trained
        geo.pull_sparse("emb", np.array([3, 4, 8]))  # 8 is read, never trained
        geo.push(common_pb2.BatchRef(pass_id=0, task_id=1, seq=seq),
                 {"w": np.ones(3, np.float32)}, {"emb": (ids, np.ones((2, 2), np.float32))})
        if seq == 0:  # nothing reached the pservers yet
            np.testing.assert_array_equal(shard.pull_dense(["w"])["w"], W0)
    assert geo.pushed == 1
    assert client.pulls == 1  # one pull for the whole window
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.0)  # two SGD steps
    np.testing.assert_allclose(shard.pull_sparse("emb", np.array([3, 4, 8])),
                               start_rows - np.array([[1.0], [1.0], [0.0]], np.float32), rtol=1e-6)
    assert [t.rows for t in [shard.tables["emb"]]] == [2]  # row 8 was only read: not created
    assert shard.applied.applications(0, 1) == 2
    # A partial window goes out on flush (a task ended); an empty one sends nothing.
    geo.pull_dense(["w"])
    geo.push(common_pb2.BatchRef(pass_id=0, task_id=1, seq=2), {"w": np.ones(3, np.float32)},
             {})
    geo.flush()
    geo.flush()
    assert geo.pushed == 2
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.5)


def test_an_export_in_geo_mode_sees_the_windows_training() -> None:
    """pull_held (what an export reads) first flushes the open window: an export taken mid-
    window holds the rows the trainer trained, not the pservers' older copy."""
    shard = _shard()
    client = _OneShard(shard)
    client.pull_held = lambda table, ids: shard.pull_held(table, ids)  # type: ignore[attr-defined]
    geo = GeoParams(client, steps=10)
    ids = np.array([3, 4], np.int64)
    before = shard.pull_sparse("emb", ids)
    geo.pull_dense(["w"])
    geo.pull_sparse("emb", ids)
    geo.push(common_pb2.BatchRef(pass_id=0, task_id=1, seq=0), {"w": np.ones(3, np.float32)},
             {"emb": (ids, np.ones((2, 2), np.float32))})
    assert geo.pushed == 0  # the window (10 steps) is still open
    rows, held = geo.pull_held("emb", ids)
    assert geo.pushed == 1
    assert held.all()
    np.testing.assert_allclose(rows, before - 0.5, rtol=1e-6)  # one SGD step, lr 0.5


def test_geo_trains_each_batch_at_its_steps_learning_rate() -> None:
    """The local copy reads a schedule at the batch's number (BatchRef.step), as the pservers
    would have: batches numbered 0, 7 and 3 of a StepDecay(step_size=5, gamma=0.1) move the
    dense values and rows by lr, lr / 10 and lr."""
    schedule = optim.StepDecay(step_size=5, gamma=0.1).to_proto()
    specs = [SPEC(name="w", kind=SPEC.DENSE, shape=[3],
                  optimizer=OPT(kind=OPT.SGD, lr=0.5, schedule=schedule)),
             SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=100,
                  optimizer=OPT(kind=OPT.SGD, lr=0.5, schedule=schedule),
                  initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.ZEROS))]
    shard = ShardState(0, 1, mode="geo")
    shard.declare(specs)
    shard.init_dense({"w": W0})
    geo = GeoParams(_OneShard(shard), steps=3)
    ids = np.array([3], np.int64)
    for seq, step in enumerate((0, 7, 3)):
        geo.pull_dense(["w"])
        geo.pull_sparse("emb", ids)
        geo.push(common_pb2.BatchRef(pass_id=0, task_id=1, seq=seq, step=step),
                 {"w": np.ones(3, np.float32)}, {"emb": (ids, np.ones((1, 2), np.float32))})
    moved = 0.5 + 0.05 + 0.5
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - moved, rtol=1e-6)
    np.testing.assert_allclose(shard.pull_sparse("emb", ids), [[-moved, -moved]], rtol=1e-6)
