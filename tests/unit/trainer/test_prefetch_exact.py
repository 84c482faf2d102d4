"""Several sparse layers per table, two tables of different dims, in one model: the step runner
pulls each table once per batch and training equals a local PyTorch run of the same model,
synchronously and with prefetch (whose staleness the reference reproduces); with prefetch and
the trainer's own dense update (what Trainer runs), the dense values are not stale: only the
sparse rows are."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from elasticps.data.batch import Bag, Batch, TensorBatch
from elasticps.proto import common_pb2
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.device import CPU, Placement
from elasticps.trainer.objective import Objective
from elasticps.trainer.optim import SGD
from elasticps.trainer.own_update import OwnDenseUpdate
from elasticps.trainer.precision import ComputePrecision
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.step import StepRunner
from tests.unit.trainer.sgd_tables import SgdTables, initial_table

LR = 0.3
IDS = 20
DIMS = {"a": 4, "b": 2}

MakeEmbedding = Callable[[str, str | tuple[str, ...]], nn.Module]
MakeBag = Callable[[str, str, str, bool], nn.Module]


class Model(nn.Module):
    """Table a (dim 4) read by two embeddings, table b (dim 2) by two bags, plus dense inputs."""

    def __init__(self, embedding: MakeEmbedding, bag: MakeBag) -> None:
        super().__init__()
        self.pair = embedding("a", ("user", "item"))
        self.shop = embedding("a", "shop")
        self.tags_mean = bag("b", "tags", "mean", False)
        self.tags_sum = bag("b", "tags", "sum", True)
        self.out = nn.Linear(2 * 4 + 4 + 2 + 2 + 2, 1)
        self.seen: list[torch.dtype] = []  # the dtype the output layer computed in, per call

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        parts = [batch.dense, self.pair(batch).flatten(1), self.shop(batch),
                 self.tags_mean(batch), self.tags_sum(batch)]
        out = self.out(torch.cat(parts, 1))
        self.seen.append(out.dtype)
        return out.squeeze(1)


class LocalEmbedding(nn.Module):
    def __init__(self, table: nn.Parameter, columns: str | tuple[str, ...]) -> None:
        super().__init__()
        self.table, self.columns = table, columns

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        if isinstance(self.columns, str):
            return self.table[batch.ids[self.columns]]
        return self.table[torch.stack([batch.ids[c] for c in self.columns], 1)]


class LocalBag(nn.Module):
    def __init__(self, table: nn.Parameter, column: str, mode: str, weighted: bool) -> None:
        super().__init__()
        self.table, self.column, self.mode, self.weighted = table, column, mode, weighted

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        bag = batch.bags[self.column]
        return nn.functional.embedding_bag(bag.values, self.table, bag.offsets, mode=self.mode,
                                           per_sample_weights=bag.weights if self.weighted
                                           else None, include_last_offset=True)


def batches(count: int = 6, rows: int = 8) -> list[Batch]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(count):
        lengths = rng.integers(0, 4, rows)
        values = rng.integers(0, IDS, int(lengths.sum()))
        out.append(Batch(
            label=rng.integers(0, 2, rows).astype(np.float32),
            dense=rng.normal(size=(rows, 2)).astype(np.float32), dense_names=("x", "y"),
            ids={c: rng.integers(0, IDS, rows) for c in ("user", "item", "shop")},
            bags={"tags": Bag(values, np.r_[0, np.cumsum(lengths)].astype(np.int64),
                              rng.uniform(0.5, 2.0, values.size).astype(np.float32))}))
    return out


def distributed(prefetch: bool, data: list[Batch], placement: Placement = CPU,
                own_dense: bool = False, precision: ComputePrecision | None = None
                ) -> tuple[SgdTables, Model]:
    torch.manual_seed(0)
    model = Model(lambda t, cols: SparseEmbedding(t, IDS, DIMS[t], columns=cols),
                  lambda t, col, mode, w: SparseEmbeddingBag(t, IDS, DIMS[t], column=col,
                                                             mode=mode,  # type: ignore[arg-type]
                                                             weighted=w))
    client = SgdTables(LR, DIMS)
    dense = DenseSync(model)
    dense.placement = placement
    tables = SparseTables(model)
    tables.placement = placement
    client.initialize(dense.values())
    own = OwnDenseUpdate(dense.table_specs(SGD(lr=LR)), 1) if own_dense else None
    runner = StepRunner(model, Objective("binary"), client, dense, prefetch=prefetch,
                        tables=tables, own_update=own, precision=precision)
    for k, batch in enumerate(data):
        runner.run(batch, common_pb2.BatchRef(seq=k), data[k + 1] if k + 1 < len(data) else None)
    runner.close()
    return client, model


def local(stale: bool, data: list[Batch], fresh_dense: bool = False) -> dict[str, torch.Tensor]:
    """One-process PyTorch SGD. ``stale``: batch k computes on the parameters after k-1
    updates (batch 0 and 1 on the initial ones), as the prefetcher's pull(k) precedes push(k-1);
    ``fresh_dense``: the dense parameters (not the tables) after k updates even so."""
    torch.manual_seed(0)
    tables = {t: nn.Parameter(torch.from_numpy(initial_table(t, IDS, d))) for t, d in DIMS.items()}
    model = Model(lambda t, cols: LocalEmbedding(tables[t], cols),
                  lambda t, col, mode, w: LocalBag(tables[t], col, mode, w))
    params = dict(model.named_parameters())  # the tables once each, under their first path
    history = [{n: p.detach().clone() for n, p in params.items()}]
    for k, batch in enumerate(data):
        source = history[max(0, k - 1)] if stale else history[k]
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(history[k][name] if fresh_dense and name.startswith("out.")
                        else source[name])
                p.grad = None
        loss = nn.functional.binary_cross_entropy_with_logits(
            model(batch.to_torch()), torch.from_numpy(batch.label))
        loss.backward()
        history.append({n: history[k][n] - LR * p.grad for n, p in params.items()
                        if p.grad is not None})
    return history[-1]


@pytest.mark.parametrize(("prefetch", "own_dense"), [(False, False), (True, False), (True, True)],
                         ids=["sync", "prefetch", "prefetch-own-dense"])
def test_several_layers_per_table_train_exactly_like_local_pytorch(prefetch: bool,
                                                                   own_dense: bool) -> None:
    data = batches()
    client, _ = distributed(prefetch, data, own_dense=own_dense)
    expected = local(stale=prefetch, data=data, fresh_dense=own_dense)
    # One pull per table per batch: every layer's lookup came from its table's pull.
    sparse_pulls = [c for c in client.calls if c.startswith("pull_sparse")]
    assert sparse_pulls == ["pull_sparse a", "pull_sparse b"] * len(data)
    for name in ("out.weight", "out.bias"):
        np.testing.assert_allclose(client.dense[name], expected[name].numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    tables = {"a": expected["pair.table"], "b": expected["tags_mean.table"]}
    touched = {t: sorted(i for (tt, i) in client.rows if tt == t) for t in DIMS}
    assert len(touched["a"]) > 10
    assert len(touched["b"]) > 10
    for (table, row_id), row in client.rows.items():
        np.testing.assert_allclose(row, tables[table][row_id].numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{table}[{row_id}]")
    moved = [i for i in touched["b"]
             if not np.allclose(client.rows[("b", i)], initial_table("b", IDS, 2)[i])]
    assert moved  # training changed the rows: not a comparison of two untouched copies


def test_the_own_dense_update_is_what_removes_the_dense_staleness() -> None:
    """The reference can tell the three apart: stale and fresh dense values end differently."""
    data = batches()
    stale = local(stale=True, data=data)["out.weight"]
    fresh = local(stale=True, data=data, fresh_dense=True)["out.weight"]
    assert not torch.allclose(stale, fresh, rtol=1e-5, atol=1e-6)
    client, _ = distributed(True, data, own_dense=True)
    np.testing.assert_allclose(client.dense["out.weight"], fresh.numpy(), rtol=1e-5, atol=1e-6)
