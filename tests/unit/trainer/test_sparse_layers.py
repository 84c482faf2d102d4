"""Sparse layers that read their own columns: the ids they derive are the ids they look up, bags
reduce as torch.nn.EmbeddingBag does, installed rows serve raw calls by subset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.data.batch import Bag, Batch
from elasticps.errors import ConfigError
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.sparse_sequence import SparseEmbeddingSequence
from tests.unit.trainer.sgd_tables import SgdTables, initial_table

ROWS = 5


def batch() -> Batch:
    return Batch(
        label=np.zeros(ROWS, np.float32),
        ids={"user": np.array([4, 9, 4, 0, 7]), "item": np.array([1, 1, 2, 3, 9]),
             "shop": np.array([2, 2, 2, 5, 5])},
        bags={"tags": Bag(np.array([3, 8, 3, 1, 6, 6, 2]), np.array([0, 2, 2, 4, 5, 7]),
                          np.array([0.5, 1.0, 2.0, -1.0, 0.25, 3.0, 1.5], np.float32))})


def bound(layer: torch.nn.Module, dims: dict[str, int]) -> SgdTables:
    client = SgdTables(lr=0.1, dims=dims)
    for module in layer.modules():
        if hasattr(module, "bind"):
            module.bind(client)
    return client


@pytest.mark.parametrize("layer", [
    SparseEmbedding("t", 10, 3, columns="user"),
    SparseEmbedding("t", 10, 3, columns=["user", "item", "shop"]),
    SparseEmbeddingBag("t", 10, 3, column="tags"),
    SparseEmbeddingBag("t", 10, 3, column="shop", mode="mean"),
], ids=["one-column", "three-columns", "bag", "single-valued-as-bag"])
def test_the_ids_a_layer_derives_are_the_ids_its_forward_pass_pulls(layer: torch.nn.Module
                                                                     ) -> None:
    client = bound(layer, {"t": 3})
    derived = layer.ids_for(batch())  # type: ignore[operator]
    layer(batch().to_torch())  # nothing installed: the layer pulls what it looks up
    assert len(client.pulled) == 1
    np.testing.assert_array_equal(client.pulled[0][1], np.unique(derived))


def test_embedding_shapes_and_values_by_column() -> None:
    table = initial_table("t", 10, 3)
    one = SparseEmbedding("t", 10, 3, columns="user")
    three = SparseEmbedding("t", 10, 3, columns=("user", "item", "shop"))
    bound(one, {"t": 3})
    bound(three, {"t": 3})
    b = batch()
    out_one, out_three = one(b.to_torch()), three(b)
    assert out_one.shape == (ROWS, 3)
    assert out_three.shape == (ROWS, 3, 3)
    np.testing.assert_allclose(out_one.detach().numpy(), table[b.ids["user"]])
    np.testing.assert_allclose(out_three.detach().numpy(),
                               table[b.stack_ids(["user", "item", "shop"])])
    single_list = SparseEmbedding("t", 10, 3, columns=["user"])  # a sequence keeps its axis
    bound(single_list, {"t": 3})
    assert single_list(b).shape == (ROWS, 1, 3)


@pytest.mark.parametrize(("mode", "weighted"), [("sum", False), ("mean", False), ("sum", True)])
def test_a_bag_reduces_like_torch_embedding_bag(mode: str, weighted: bool) -> None:
    b = batch()
    layer = SparseEmbeddingBag("t", 10, 4, column="tags", mode=mode,  # type: ignore[arg-type]
                               weighted=weighted)
    client = bound(layer, {"t": 4})
    out = layer(b.to_torch())
    reference = torch.nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=True)
    with torch.no_grad():
        reference.weight.copy_(torch.from_numpy(initial_table("t", 10, 4)))
    bag = b.bags["tags"]
    weights = torch.from_numpy(bag.weights) if weighted and bag.weights is not None else None
    expected = reference(torch.from_numpy(bag.values), torch.from_numpy(bag.offsets),
                         per_sample_weights=weights)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(out[1].detach().numpy(), 0.0)  # row 1's bag is empty
    # The gradient of each touched row equals the one EmbeddingBag's table gets.
    scale = torch.arange(1, ROWS * 4 + 1, dtype=torch.float32).view(ROWS, 4)
    (out * scale).sum().backward()
    (expected * scale).sum().backward()
    grad = layer.take_grads()
    assert grad is not None
    ids, rows = grad
    assert reference.weight.grad is not None
    np.testing.assert_allclose(rows, reference.weight.grad[torch.from_numpy(ids)].numpy(),
                               rtol=1e-6)
    np.testing.assert_array_equal(ids, np.unique(bag.values))
    assert client.pulled[0][0] == "t"


def test_raw_id_tensors_use_installed_rows_when_they_hold_every_id() -> None:
    """A layer called with ids (a custom feed) takes its rows from the table's installed rows
    by subset lookup; ids the install lacks are pulled, never looked up wrong."""
    deriving = SparseEmbedding("t", 10, 2, columns="user")
    raw = SparseEmbedding("t", 10, 2)
    model = torch.nn.ModuleDict({"deriving": deriving, "raw": raw})
    tables = SparseTables(model)
    client = SgdTables(lr=0.1, dims={"t": 2})
    tables.bind(client)
    b = batch()
    tables.install(tables.pull(client, b), b, requires_grad=True)
    assert len(client.pulled) == 1  # one pull for the table: the deriving layer's ids
    table = initial_table("t", 10, 2)
    subset = torch.tensor([[9, 4], [0, 0]])
    out = raw(subset)
    assert len(client.pulled) == 1  # served from the installed rows
    np.testing.assert_allclose(out.detach().numpy(), table[subset.numpy()])
    outside = raw(torch.tensor([4, 5]))  # 5 was not installed: pulled now
    assert len(client.pulled) == 2
    np.testing.assert_array_equal(client.pulled[1][1], [4, 5])
    np.testing.assert_allclose(outside.detach().numpy(), table[[4, 5]])
    (deriving(b).sum() + out.sum() + 2 * outside.sum()).backward()
    grads = tables.grads()["t"]
    summed: dict[int, np.ndarray] = {}
    for i, g in zip(*grads, strict=True):
        summed[int(i)] = summed.get(int(i), 0) + g
    # user ids 4,9,4,0,7; subset 9,4,0,0; outside (x2) 4,5
    assert {k: float(v[0]) for k, v in summed.items() if v[0]} == {
        0: 3.0, 4: 5.0, 5: 2.0, 7: 1.0, 9: 2.0}
    tables.clear()
    with pytest.raises(ConfigError, match="reads no column"):
        raw(b)


def test_a_missing_column_is_a_config_error_naming_it() -> None:
    b = batch()
    with pytest.raises(ConfigError, match=r"\['country'\]; the batch's single-valued columns"):
        SparseEmbedding("t", 10, 2, columns=["user", "country"]).ids_for(b)
    with pytest.raises(ConfigError, match="read it with SparseEmbeddingBag"):
        SparseEmbedding("t", 10, 2, columns="tags").ids_for(b)
    with pytest.raises(ConfigError, match="reads column 'genres'"):
        SparseEmbeddingBag("t", 10, 2, column="genres").ids_for(b)
    with pytest.raises(ConfigError, match="mode='sum'"):
        SparseEmbeddingBag("t", 10, 2, column="tags", mode="mean", weighted=True)
    with pytest.raises(ConfigError, match="mode='max'"):
        SparseEmbeddingBag("t", 10, 2, column="tags", mode="max")  # type: ignore[arg-type]
    unweighted = Batch(label=np.zeros(1, np.float32),
                       bags={"tags": Bag(np.array([1]), np.array([0, 1]))})
    layer = SparseEmbeddingBag("t", 10, 2, column="tags", weighted=True)
    bound(layer, {"t": 2})
    with pytest.raises(ConfigError, match="no per-value weights"):
        layer(unweighted)


def test_layers_of_one_table_must_agree_on_its_shape() -> None:
    model = torch.nn.ModuleList([SparseEmbedding("t", 10, 2, columns="user"),
                                 SparseEmbeddingBag("t", 10, 3, column="tags")])
    with pytest.raises(ConfigError, match="sparse table 't' is used with two different shapes"):
        SparseTables(model)


@pytest.mark.parametrize("max_len", [None, 1, 3])
def test_a_sequence_is_each_rows_embeddings_in_order_padded_with_a_mask(max_len: int | None
                                                                        ) -> None:
    """Row i's values (its last max_len) are positions 0..n-1 of [B, L, dim], mask True; the
    rest are zeros, mask False; gradients reach exactly the rows looked up, as a
    torch.nn.Embedding's table gets them; the layer pulls only the kept values."""
    b = batch()
    layer = SparseEmbeddingSequence("t", 10, 4, column="tags", max_len=max_len)
    client = bound(layer, {"t": 4})
    out = layer(b.to_torch())
    bag = b.bags["tags"]
    rows = [bag.values[bag.offsets[i]:bag.offsets[i + 1]] for i in range(ROWS)]
    width = max(len(r) for r in rows) if max_len is None else max_len
    reference = torch.nn.Embedding(10, 4)
    with torch.no_grad():
        reference.weight.copy_(torch.from_numpy(initial_table("t", 10, 4)))
    expected = torch.zeros(ROWS, width, 4)
    for i, values in enumerate(rows):
        kept = values[len(values) - min(len(values), width):]
        expected[i, :len(kept)] = reference(torch.from_numpy(kept))
        assert out.mask[i].tolist() == [j < len(kept) for j in range(width)]
    assert out.values.shape == (ROWS, width, 4)
    np.testing.assert_allclose(out.values.detach().numpy(), expected.detach().numpy())
    kept_ids = np.unique(layer.ids_for(b))  # type: ignore[arg-type]
    kept_per_row = [min(len(values), width) for values in rows]
    np.testing.assert_array_equal(layer.examples_for(b),  # the row each kept id comes from
                                  np.repeat(np.arange(ROWS), kept_per_row))
    np.testing.assert_array_equal(client.pulled[0][1], kept_ids)
    scale = torch.arange(1, ROWS * width * 4 + 1, dtype=torch.float32).view(ROWS, width, 4)
    (out.values * scale).sum().backward()
    (expected * scale).sum().backward()
    grad = layer.take_grads()
    assert grad is not None
    assert reference.weight.grad is not None
    np.testing.assert_array_equal(grad[0], kept_ids)
    np.testing.assert_allclose(grad[1], reference.weight.grad[torch.from_numpy(kept_ids)].numpy())
    # Called with PyTorch's (values, offsets), it gives the same.
    raw = layer(torch.from_numpy(bag.values), torch.from_numpy(bag.offsets))
    np.testing.assert_allclose(raw.values.detach().numpy(), out.values.detach().numpy())
    assert layer.export_record() == {"table": "t", "dim": 4, "kind": "sequence",
                                     "column": "tags", "max_len": max_len}


def test_a_sequence_needs_a_multi_valued_column_and_a_positive_max_len() -> None:
    with pytest.raises(ConfigError, match="multi-valued column 'user'"):
        SparseEmbeddingSequence("t", 10, 2, column="user").ids_for(batch())
    with pytest.raises(ConfigError, match="max_len=0"):
        SparseEmbeddingSequence("t", 10, 2, column="tags", max_len=0)


def test_a_sequence_and_a_bag_of_one_table_share_one_pull_and_one_gradient() -> None:
    seq = SparseEmbeddingSequence("t", 10, 3, column="tags", max_len=2)
    bag = SparseEmbeddingBag("t", 10, 3, column="tags")
    tables = SparseTables(torch.nn.ModuleDict({"seq": seq, "bag": bag}))
    client = SgdTables(lr=0.1, dims={"t": 3})
    tables.bind(client)
    b = batch()
    alone = seq(b).values.detach().clone()  # the layer pulls for itself: no install
    tables.install(tables.pull(client, b), b, requires_grad=True)
    out = seq(b)
    np.testing.assert_allclose(out.values.detach().numpy(), alone.numpy())
    (out.values.sum() + bag(b).sum()).backward()
    ids, _ = tables.grads()["t"]
    np.testing.assert_array_equal(ids, np.unique(b.bags["tags"].values))  # one installed leaf
    assert len(client.pulled) == 2  # the layer's own pull, then one for the table
