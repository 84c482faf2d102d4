"""Show/click counts for tables that evict by score: per unique id, the examples of the batch
that show it and the positive ones among them, carried next to the gradient."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from elasticps.config import load_config
from elasticps.data.batch import Bag, Batch
from elasticps.proto import common_pb2
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.sparse_bag import SparseEmbeddingBag
from elasticps.trainer.sparse_rows import SparseTables, show_click_counts
from elasticps.trainer.trainer import Trainer
from tests.unit.trainer.sgd_tables import SgdTables


def test_an_example_showing_an_id_twice_counts_once() -> None:
    # ids looked up: example 0 -> u0 u0 u1; example 1 -> u1; example 2 -> u2 u1
    inverse = np.array([0, 0, 1, 1, 2, 1])
    examples = np.array([0, 0, 0, 1, 2, 2])
    shows, clicks = show_click_counts(inverse, examples, np.array([True, False, True]), 3)
    np.testing.assert_array_equal(shows, [1, 3, 1])
    np.testing.assert_array_equal(clicks, [1, 2, 1])
    shows, clicks = show_click_counts(inverse, examples, None, 3)
    np.testing.assert_array_equal(clicks, [0, 0, 0])


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.slots = SparseEmbedding("t", 20, 2, columns=["user", "item"], evict="score")
        self.tags = SparseEmbeddingBag("t", 20, 2, column="tags", evict="score")
        self.other = SparseEmbedding("o", 20, 2, columns="user")

    def forward(self, b: Batch) -> torch.Tensor:
        return self.slots(b).sum() + self.tags(b).sum() + self.other(b).sum()


def _batch(label: np.ndarray) -> Batch:
    return Batch(label=label,
                 ids={"user": np.array([4, 9, 4]), "item": np.array([9, 1, 2])},
                 bags={"tags": Bag(np.array([4, 4, 7, 1]), np.array([0, 2, 3, 4]))})


def _pushed(label: np.ndarray, clicks_from_label: bool = True):
    model = Model()
    tables = SparseTables(model)
    tables.counted = {"t"}
    tables.clicks_from_label = clicks_from_label
    client = SgdTables(lr=0.1, dims={"t": 2, "o": 2})
    tables.bind(client)
    b = _batch(label)
    tables.install(tables.pull(client, b), b, requires_grad=True)
    model(b).backward()
    grads, counts = tables.grads_and_counts()
    tables.clear()
    return grads, counts


def test_counts_follow_every_layer_of_the_table_and_the_labels() -> None:
    grads, counts = _pushed(np.array([1, 0, 1], np.float32))
    assert set(counts) == {"t"}  # only the counted table
    ids = grads["t"][0]
    got = {int(i): (float(s), float(c)) for i, s, c in zip(ids, *counts["t"], strict=True)}
    # example 0: user 4, item 9, tags 4 4 -> {4, 9}; example 1: 9, 1, tag 7 -> {1, 7, 9};
    # example 2: 4, 2, tag 1 -> {1, 2, 4}; clicks: examples 0 and 2
    assert got == {1: (2.0, 1.0), 2: (1.0, 1.0), 4: (2.0, 2.0), 7: (1.0, 0.0), 9: (2.0, 1.0)}


def test_without_binary_labels_there_are_shows_only() -> None:
    _, counts = _pushed(np.array([1, 0, 1], np.float32), clicks_from_label=False)
    assert counts["t"][1].tolist() == [0.0] * counts["t"][1].size
    _, counts = _pushed(np.ones((3, 2), np.float32))  # two labels a row: not clicks
    assert counts["t"][1].tolist() == [0.0] * counts["t"][1].size
    assert counts["t"][0].sum() == 8  # the shows are still counted


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = SparseEmbedding("emb", 100, 3, columns=["a", "b"])  # no policy
        self.out = torch.nn.Linear(6, 1)

    def forward(self, batch) -> torch.Tensor:
        return self.out(self.embedding(batch).flatten(1)).squeeze(1)


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_trainer_pushes_counts_for_the_tables_the_job_scores(prefetch: bool) -> None:
    """The job spec's tables: (PADDLE_SPARSE_POLICIES) turns score eviction on for a layer
    that declares none: the trainer's pushes carry that table's counts from the labels."""
    trainer = Trainer(Tiny(), prefetch=prefetch)
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": json.dumps(
        {"emb": {"evict": "score"}})})
    tables = SgdTables(lr=0.5, dims={"emb": 3})
    trainer.attach(tables, None, "trainer-0")
    runner = trainer.runner()
    pairs = np.array([[1, 2], [2, 2], [5, 1]], dtype=np.int64)
    batch = Batch(label=np.array([1, 0, 0], np.float32),
                  ids={"a": pairs[:, 0].copy(), "b": pairs[:, 1].copy()})
    runner.run(batch, common_pb2.BatchRef(task_id=0, seq=0), None)
    runner.close()
    trainer.close()
    ids = tables.pushed_ids["emb"]
    got = {int(i): (float(s), float(c)) for i, s, c in zip(ids, *tables.counts["emb"],
                                                           strict=True)}
    assert got == {1: (2.0, 1.0), 2: (2.0, 1.0), 5: (1.0, 0.0)}
