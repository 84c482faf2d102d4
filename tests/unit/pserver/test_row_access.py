"""Whole-row reads and writes give exactly what numpy's fancy indexing gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticps.pserver.row_access import put_rows, take_rows

DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint32, np.bool_)


def _table(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return (rng.standard_normal(shape) * 100).astype(dtype)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 200), width=st.integers(0, 12), count=st.integers(0, 200),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_rows_read_and_written_as_fancy_indexing_does(
        capacity: int, width: int, count: int, dtype: type, seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = _table(rng, (capacity, width), dtype)
    rows = rng.permutation(capacity)[:count].astype(np.int64)  # distinct, any order
    np.testing.assert_array_equal(take_rows(table, rows), table[rows])
    new = _table(rng, (rows.shape[0], width), dtype)
    expected = table.copy()
    expected[rows] = new
    put_rows(table, rows, new)
    np.testing.assert_array_equal(table, expected)


@pytest.mark.parametrize("layout", ["one-dimensional", "strided table", "strided values"])
def test_other_layouts_fall_back_to_numpy(layout: str) -> None:
    rng = np.random.default_rng(0)
    rows = np.array([5, 0, 3], np.int64)
    if layout == "one-dimensional":
        table, new = _table(rng, (8,), np.int32), _table(rng, (3,), np.int32)
    elif layout == "strided table":
        table, new = _table(rng, (8, 8), np.float32)[:, ::2], _table(rng, (3, 4), np.float32)
    else:
        table, new = _table(rng, (8, 4), np.float32), _table(rng, (3, 8), np.float32)[:, ::2]
    expected = table.copy()
    expected[rows] = new
    put_rows(table, rows, new)
    np.testing.assert_array_equal(table, expected)
    np.testing.assert_array_equal(take_rows(table, rows), expected[rows])


def test_a_row_out_of_range_is_refused_and_writes_nothing() -> None:
    table = np.zeros((4, 3), np.float32)
    with pytest.raises(IndexError):
        put_rows(table, np.array([1, 4]), np.ones((2, 3), np.float32))
    with pytest.raises(IndexError):
        take_rows(table, np.array([4]))
    assert not table.any()
