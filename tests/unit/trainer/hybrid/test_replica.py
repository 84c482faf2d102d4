"""DenseReplica: one optimizer step per round, and a state that travels bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.optim import SGD, Adagrad, Adam, AdamW, Momentum, OptimizerSpec


def specs(optimizer: OptimizerSpec) -> list[pserver_pb2.TableSpec]:
    return [pserver_pb2.TableSpec(name=name, kind=pserver_pb2.TableSpec.DENSE, shape=shape,
                                  dtype=common_pb2.FLOAT32, optimizer=optimizer.to_proto())
            for name, shape in (("w", [2, 3]), ("b", [3]))]


def trained(optimizer: OptimizerSpec) -> DenseReplica:
    replica = DenseReplica(specs(optimizer))
    rng = np.random.default_rng(1)
    replica.set_initial({"w": rng.normal(size=(2, 3)), "b": rng.normal(size=3)})
    for step in range(3):
        replica.apply(rng.normal(size=replica.size).astype(np.float32), step)
        replica.record([(0, step, 0)])
    return replica


def test_sgd_applies_the_round_mean_once_per_round() -> None:
    replica = DenseReplica(specs(SGD(lr=0.5)))
    replica.set_initial({"w": np.zeros((2, 3)), "b": np.ones(3)})
    replica.apply(np.full(replica.size, 2.0, np.float32), 0)
    assert replica.values()["w"].tolist() == [[-1.0] * 3] * 2
    assert replica.values()["b"].tolist() == [0.0] * 3
    assert replica.step == 1


def test_pack_and_unpack_carry_values_optimizer_state_and_applied_batches_exactly() -> None:
    source = trained(Adam(lr=0.01))
    source.adopt(4)
    target = DenseReplica(specs(Adam(lr=0.01)))
    target.unpack(*source.pack())
    assert target.key == source.key == (4, 3)
    assert target.pack()[1].tobytes() == source.pack()[1].tobytes()
    assert target.applied.contains(0, 2, 0)
    assert not target.applied.contains(0, 3, 0)
    # the next step from either copy is the same, bit for bit
    grad = np.linspace(-1, 1, source.size, dtype=np.float32)
    source.apply(grad, 5)
    target.apply(grad, 5)
    assert target.pack()[1].tobytes() == source.pack()[1].tobytes()


def test_a_snapshot_restores_the_state_and_its_key() -> None:
    source = trained(Adam(lr=0.01))
    source.adopt(2)
    target = DenseReplica(specs(Adam(lr=0.01)))
    target.restore(source.snapshot())
    assert target.key == source.key
    assert target.pack()[1].tobytes() == source.pack()[1].tobytes()


@pytest.mark.parametrize("optimizer", [
    SGD(lr=0.5), Momentum(lr=0.1), Adagrad(lr=0.1), Adam(lr=0.01, clip_norm=0.5),
    AdamW(lr=0.01, weight_decay=0.1), SGD(lr=0.5, weight_decay=0.1)], ids=repr)
def test_values_once_read_never_change(optimizer: OptimizerSpec) -> None:
    """The dense group hands the step the replica's own arrays, not copies: every change of
    state (a round, a broadcast's state, a checkpoint's) must replace them, never write into
    them, or a batch's values would move under it."""
    replica = trained(optimizer)
    other, third = trained(optimizer), trained(optimizer)
    other.apply(np.ones(other.size, np.float32), 7)
    third.apply(np.full(third.size, -2.0, np.float32), 7)
    rng = np.random.default_rng(2)
    changes = [
        lambda: replica.apply(rng.normal(size=replica.size).astype(np.float32), 3),
        lambda: replica.commit({n: t.compute(np.ones(t.length, np.float32))
                                for n, t in replica.tables.items()}),
        lambda: replica.unpack(*other.pack()),
        lambda: replica.restore(third.snapshot()),
    ]
    for change in changes:
        held = replica.values()
        before = {name: array.copy() for name, array in held.items()}
        change()
        for name, array in held.items():
            np.testing.assert_array_equal(array, before[name], err_msg=name)
        assert any(not np.array_equal(replica.values()[n], before[n]) for n in before)


def test_a_state_of_other_tables_is_refused() -> None:
    other = DenseReplica(specs(SGD(lr=1.0))[:1])
    target = DenseReplica(specs(Adam(lr=0.01)))
    assert other.fingerprint() != target.fingerprint()
    with pytest.raises(InvalidArgumentError, match="does not fit"):
        target.unpack(*other.pack())
