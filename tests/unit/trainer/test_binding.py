"""The torch binding against an in-memory stand-in for the pservers (a unit test of the layer,
the dense sync and the step runner; the real pservers are in tests/integration/trainer)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from elasticps.errors import ConfigError, FailedPreconditionError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.optim import SGD, Adam, Momentum
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.step import StepRunner


class SgdTables:
    """Dense and sparse tables with plain SGD, recording the order of calls."""

    def __init__(self, lr: float, dim: int) -> None:
        self.lr, self.dim = lr, dim
        self.dense: dict[str, np.ndarray] = {}
        self.rows: dict[int, np.ndarray] = {}
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def declare_tables(self, specs: list[pserver_pb2.TableSpec]) -> None:
        self.calls.append("declare")

    def initialize(self, dense_values: dict[str, np.ndarray], init_fn: Any = None) -> None:
        self.dense = {k: v.copy() for k, v in dense_values.items()}

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        with self.lock:
            self.calls.append("pull_dense")
            return {k: v.copy() for k, v in self.dense.items()}

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        with self.lock:
            self.calls.append("pull_sparse")
            return np.stack([self.rows.setdefault(int(i), np.full(self.dim, 0.1 * (int(i) % 7),
                                                                    dtype=np.float32)).copy()
                             for i in ids])

    def push(self, batch: common_pb2.BatchRef, dense_grads: Mapping[str, np.ndarray],
             sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        with self.lock:
            self.calls.append(f"push {batch.seq}")
            for name, grad in dense_grads.items():
                self.dense[name] -= self.lr * grad
            for ids, grads in sparse_grads.values():
                for i, g in zip(ids, grads, strict=True):
                    self.rows[int(i)] -= self.lr * g

    def close(self) -> None:
        pass


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = SparseEmbedding("emb", 100, 3)
        self.out = torch.nn.Linear(6, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embedding(ids).flatten(1)).squeeze(1)


class Batch:
    def __init__(self, ids: list[list[int]], label: list[float]) -> None:
        self.sparse = np.array(ids, dtype=np.int64)
        self.label = np.array(label, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.label)


def feed(batch: Any) -> tuple[Sequence[torch.Tensor], torch.Tensor]:
    return (torch.from_numpy(batch.sparse),), torch.from_numpy(batch.label)


BATCHES = [Batch([[1, 2], [2, 2], [5, 1]], [1, 0, 1]), Batch([[3, 2], [1, 1]], [0, 1]),
           Batch([[7, 9], [2, 3], [9, 9]], [1, 1, 0])]


def run(prefetch: bool) -> tuple[SgdTables, Tiny]:
    torch.manual_seed(0)
    model = Tiny()
    tables = SgdTables(lr=0.5, dim=3)
    dense = DenseSync(model)
    tables.initialize(dense.values())
    runner = StepRunner(model, torch.nn.BCEWithLogitsLoss(), tables, dense, prefetch=prefetch,
                        feed=feed)
    for k, batch in enumerate(BATCHES):
        nxt = BATCHES[k + 1] if k + 1 < len(BATCHES) else None
        runner.run(batch, common_pb2.BatchRef(task_id=0, seq=k), nxt)
    runner.close()
    return tables, model


def reference() -> tuple[dict[str, np.ndarray], dict[int, np.ndarray]]:
    """The same training in plain PyTorch: a local table and SGD."""
    torch.manual_seed(0)
    model = Tiny()
    table = torch.nn.Parameter(torch.tensor([[0.1 * (i % 7)] * 3 for i in range(100)]))
    lin = model.out
    opt = torch.optim.SGD([table, *lin.parameters()], lr=0.5)
    for batch in BATCHES:
        opt.zero_grad()
        ids = torch.from_numpy(batch.sparse)
        logits = lin(table[ids].flatten(1)).squeeze(1)
        torch.nn.BCEWithLogitsLoss()(logits, torch.from_numpy(batch.label)).backward()
        opt.step()
    dense = {"out.weight": lin.weight.detach().numpy(), "out.bias": lin.bias.detach().numpy()}
    return dense, {i: table[i].detach().numpy() for i in range(100)}


def test_synchronous_steps_equal_local_pytorch_sgd() -> None:
    tables, _ = run(prefetch=False)
    dense, rows = reference()
    for name, value in dense.items():
        np.testing.assert_allclose(tables.dense[name], value, rtol=1e-6, atol=1e-7)
    for i, row in tables.rows.items():
        np.testing.assert_allclose(row, rows[i], rtol=1e-6, atol=1e-7)
    # Duplicate ids in a batch are pushed once, with the summed gradient (row 2 moved).
    assert not np.allclose(tables.rows[2], 0.2)


def test_prefetch_pulls_the_next_batch_before_pushing_this_one() -> None:
    tables, _ = run(prefetch=True)
    calls = [c for c in tables.calls if c != "declare"]
    # batch 0 pulled on demand; then pull(1) before push(0), pull(2) before push(1).
    assert calls == ["pull_dense", "pull_sparse", "pull_dense", "pull_sparse", "push 0",
                     "pull_dense", "pull_sparse", "push 1", "push 2"]


def test_sparse_embedding_checks_ids_and_binding() -> None:
    layer = SparseEmbedding("emb", 10, 2)
    with pytest.raises(FailedPreconditionError, match="not bound"):
        layer(torch.tensor([[1, 2]]))
    layer.bind(SgdTables(0.1, 2))
    with pytest.raises(InvalidArgumentError, match="got id 10, outside"):
        layer(torch.tensor([[1, 10]]))
    with pytest.raises(InvalidArgumentError, match="got id -1"):
        layer(torch.tensor([[-1, 3]]))
    out = layer(torch.tensor([[3, 3], [4, 3]]))
    assert out.shape == (2, 2, 2)
    out.sum().backward()
    ids, grads = layer.take_grads() or (None, None)
    assert ids is not None
    assert grads is not None
    np.testing.assert_array_equal(ids, [3, 4])
    np.testing.assert_allclose(grads, [[3.0, 3.0], [1.0, 1.0]])  # id 3 was used three times
    assert layer.take_grads() is None


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
