"""The torch binding against an in-memory stand-in for the pservers (a unit test of the layer,
the dense sync and the step runner; the real pservers are in tests/integration/trainer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from elasticps.data.batch import Batch, TensorBatch
from elasticps.errors import ConfigError, FailedPreconditionError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.objective import Objective
from elasticps.trainer.optim import SGD, Adam, Momentum
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.step import StepRunner
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables, initial_table


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = SparseEmbedding("emb", 100, 3, columns=["a", "b"])
        self.out = torch.nn.Linear(6, 1)

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.out(self.embedding(batch).flatten(1)).squeeze(1)


def make_batch(ids: list[list[int]], label: list[float]) -> Batch:
    pairs = np.array(ids, dtype=np.int64)
    return Batch(label=np.array(label, dtype=np.float32),
                 ids={"a": pairs[:, 0].copy(), "b": pairs[:, 1].copy()})


BATCHES = [make_batch([[1, 2], [2, 2], [5, 1]], [1, 0, 1]), make_batch([[3, 2], [1, 1]], [0, 1]),
           make_batch([[7, 9], [2, 3], [9, 9]], [1, 1, 0])]


def run(prefetch: bool) -> tuple[SgdTables, Tiny]:
    torch.manual_seed(0)
    model = Tiny()
    tables = SgdTables(lr=0.5, dims={"emb": 3})
    dense = DenseSync(model)
    tables.initialize(dense.values())
    runner = StepRunner(model, Objective("binary"), tables, dense, prefetch=prefetch)
    for k, batch in enumerate(BATCHES):
        nxt = BATCHES[k + 1] if k + 1 < len(BATCHES) else None
        runner.run(batch, common_pb2.BatchRef(task_id=0, seq=k), nxt)
    runner.close()
    return tables, model


def reference() -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The same training in plain PyTorch: a local table and SGD."""
    torch.manual_seed(0)
    model = Tiny()
    table = torch.nn.Parameter(torch.from_numpy(initial_table("emb", 100, 3)))
    lin = model.out
    opt = torch.optim.SGD([table, *lin.parameters()], lr=0.5)
    for batch in BATCHES:
        opt.zero_grad()
        ids = torch.from_numpy(batch.stack_ids(["a", "b"]))
        logits = lin(table[ids].flatten(1)).squeeze(1)
        torch.nn.BCEWithLogitsLoss()(logits, torch.from_numpy(batch.label)).backward()
        opt.step()
    dense = {"out.weight": lin.weight.detach().numpy(), "out.bias": lin.bias.detach().numpy()}
    return dense, table.detach().numpy()


def test_synchronous_steps_equal_local_pytorch_sgd() -> None:
    tables, _ = run(prefetch=False)
    dense, rows = reference()
    for name, value in dense.items():
        np.testing.assert_allclose(tables.dense[name], value, rtol=1e-6, atol=1e-7)
    for (_, i), row in tables.rows.items():
        np.testing.assert_allclose(row, rows[i], rtol=1e-6, atol=1e-7)
    # Duplicate ids in a batch are pushed once, with the summed gradient (row 2 moved).
    assert not np.allclose(tables.rows[("emb", 2)], initial_table("emb", 3, 3)[2])


def test_prefetch_pulls_the_next_batch_before_pushing_this_one() -> None:
    tables, _ = run(prefetch=True)
    calls = [c for c in tables.calls if c != "declare"]
    # batch 0 pulled on demand; then pull(1) before push(0), pull(2) before push(1).
    assert calls == ["pull_dense", "pull_sparse emb", "pull_dense", "pull_sparse emb", "push 0",
                     "pull_dense", "pull_sparse emb", "push 1", "push 2"]


def test_sparse_embedding_checks_ids_and_binding() -> None:
    layer = SparseEmbedding("emb", 10, 2)
    with pytest.raises(FailedPreconditionError, match="not bound"):
        layer(torch.tensor([[1, 2]]))
    layer.bind(SgdTables(0.1, {"emb": 2}))
    with pytest.raises(InvalidArgumentError, match="got id 10, outside"):
        layer(torch.tensor([[1, 10]]))
    with pytest.raises(InvalidArgumentError, match="got id -1"):
        layer(torch.tensor([[-1, 3]]))
    with pytest.raises(ConfigError, match="reads no column"):
        layer(BATCHES[0])
    out = layer(torch.tensor([[3, 3], [4, 3]]))
    assert out.shape == (2, 2, 2)
    out.sum().backward()
    ids, grads = layer.take_grads() or (None, None)
    assert ids is not None
    assert grads is not None
    np.testing.assert_array_equal(ids, [3, 4])
    np.testing.assert_allclose(grads, [[3.0, 3.0], [1.0, 1.0]])  # id 3 was used three times
    assert layer.take_grads() is None


def test_sparse_ids_is_refused_with_the_way_forward() -> None:
    with pytest.raises(ConfigError, match=r"columns=\[...\]"):
        Trainer(Tiny(), sparse_ids=lambda batch: {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'prefetched'"):
        Trainer(Tiny(), prefetched=True)


def test_evaluate_works_after_training_until_close() -> None:
    """The runner closing (end of dist_train) leaves the layers bound; Trainer.close unbinds."""
    torch.manual_seed(0)
    trainer = Trainer(Tiny(), prefetch=False)
    tables = SgdTables(lr=0.5)
    trainer.attach(tables, None, "trainer-0")
    runner = trainer.runner()
    for k, batch in enumerate(BATCHES):
        runner.run(batch, common_pb2.BatchRef(task_id=0, seq=k), None)
    runner.close()
    metrics = trainer.evaluate(BATCHES)
    # The reference: the trained parameters, looked up by hand.
    model = Tiny()
    model.out.load_state_dict({k.removeprefix("out."): torch.from_numpy(v)
                               for k, v in tables.dense.items()})
    probs, labels = [], []
    for batch in BATCHES:
        rows = torch.from_numpy(np.stack([tables.rows[("emb", int(i))]
                                          for i in batch.stack_ids(["a", "b"]).reshape(-1)]))
        with torch.no_grad():
            probs.append(torch.sigmoid(model.out(rows.view(len(batch), -1)).squeeze(1)))
        labels.append(torch.from_numpy(batch.label))
    p, y = torch.cat(probs).double(), torch.cat(labels).double()
    expected = float(-(y * p.log() + (1 - y) * (1 - p).log()).mean())
    assert metrics["logloss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["samples"] == 8
    trainer.close()
    with pytest.raises(ConfigError, match="not connected"):
        trainer.evaluate(BATCHES)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: SparseEmbedding("a/b", 0, 2), "without '/'"),
    (lambda: SparseEmbedding("t", -1, 2), "num_embeddings=-1"),
    (lambda: SparseEmbedding("t", 0, 0), "dim=0"),
    (lambda: SGD(lr=0.0), "lr=0.0"),
    (lambda: Adam(beta1=1.0), "beta1=1.0"),
    (lambda: Momentum(momentum=float("nan")), "momentum=nan"),
])
def test_bad_options_are_refused_with_their_name(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_optimizer_specs_map_to_the_proto() -> None:
    spec = Adam(lr=0.01, beta2=0.99).to_proto()
    assert spec.kind == pserver_pb2.OptimizerSpec.ADAM
    assert (spec.lr, spec.beta1, spec.beta2) == (0.01, 0.9, 0.99)
    assert Momentum(lr=0.1, momentum=0.5).to_proto().momentum == 0.5


def test_dense_sync_refuses_a_pull_of_the_wrong_size() -> None:
    dense = DenseSync(torch.nn.Linear(3, 2))
    with pytest.raises(InvalidArgumentError, match="'weight' holds 5 values, parameter needs 6"):
        dense.load({"weight": np.zeros(5, np.float32), "bias": np.zeros(2, np.float32)})
    with pytest.raises(ConfigError, match="dense_sync_every=0"):
        DenseSync(torch.nn.Linear(3, 2), sync_every=0)
