"""The batch layout every reader yields and every model receives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.data.batch import Bag, Batch
from elasticps.errors import DataError


def make_batch() -> Batch:
    return Batch(
        label=np.array([1, 0, 1], np.float32),
        dense=np.arange(6, dtype=np.float32).reshape(3, 2), dense_names=("age", "income"),
        ids={"country": np.array([5, 7, 5], np.int64)},
        bags={"genres": Bag(np.array([1, 2, 3], np.int64), np.array([0, 2, 2, 3], np.int64))},
        weight=np.ones(3, np.float32))


def test_slices_rebase_bags_and_keep_every_column() -> None:
    part = make_batch().slice(1, 3)
    assert len(part) == 2
    assert part.dense.tolist() == [[2, 3], [4, 5]]
    assert part.ids["country"].tolist() == [7, 5]
    assert part.bags["genres"].values.tolist() == [3]
    assert part.bags["genres"].offsets.tolist() == [0, 0, 1]


def test_to_torch_shares_memory_and_keeps_the_source() -> None:
    batch = make_batch()
    tensors = batch.to_torch()
    assert tensors.dense.data_ptr() == batch.dense.ctypes.data
    assert tensors.bags["genres"].offsets.dtype == torch.int64
    assert tensors.source is batch
    assert len(tensors) == 3


def test_a_batch_without_dense_columns_has_an_empty_matrix() -> None:
    batch = Batch(label=np.zeros(4, np.float32), ids={"w": np.zeros(4, np.int64)})
    assert batch.dense.shape == (4, 0)
    assert batch.slice(0, 2).dense.shape == (2, 0)


@pytest.mark.parametrize(("change", "match"), [
    ({"ids": {"country": np.zeros(2, np.int64)}}, "country"),
    ({"dense": np.zeros((3, 3), np.float32)}, "dense"),
    ({"weight": np.ones(4, np.float32)}, "weight"),
    ({"bags": {"g": Bag(np.zeros(1, np.int64), np.array([0, 1], np.int64))}}, "'g'"),
])
def test_inconsistent_columns_are_refused_by_name(change: dict[str, object], match: str) -> None:
    fields = {"label": np.zeros(3, np.float32), "dense": np.zeros((3, 2), np.float32),
              "dense_names": ("a", "b"), **change}
    with pytest.raises(DataError, match=match):
        Batch(**fields)  # type: ignore[arg-type]


def test_bag_offsets_must_cover_the_values() -> None:
    with pytest.raises(DataError, match="offsets"):
        Bag(np.zeros(3, np.int64), np.array([0, 2], np.int64))
    with pytest.raises(DataError, match="offsets"):
        Bag(np.zeros(3, np.int64), np.array([0, 2, 1, 3], np.int64))
