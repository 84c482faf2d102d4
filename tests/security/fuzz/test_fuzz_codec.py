"""Fuzz: the tensor codec gets arbitrary dtypes, shapes and bytes; only InvalidArgumentError
comes out, and what it accepts is consistent (element count x item size = bytes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2
from elasticps.rpc.codec import MAX_DIMS, decode_sparse, decode_tensor
from tests.security.fuzz.common import FUZZ

dims = st.one_of(st.integers(min_value=-3, max_value=6), st.just(0), st.just(1),
                 st.integers(min_value=0, max_value=2**63 - 1))
ITEMSIZE = {common_pb2.FLOAT32: 4, common_pb2.FLOAT64: 8, common_pb2.INT64: 8,
            common_pb2.UINT8: 1, common_pb2.BOOL: 1}


@st.composite
def tensors(draw: st.DrawFn) -> common_pb2.Tensor:
    """Tensors whose byte length often matches their declared shape, so the checks after the
    length check (dimension count, numpy's own limits) are reached too."""
    dtype = draw(st.integers(min_value=0, max_value=15))
    shape = draw(st.lists(dims, max_size=70) | st.lists(st.just(1), min_size=30, max_size=70))
    count = math.prod(shape) if all(d >= 0 for d in shape) else -1
    if 0 <= count <= 64 and draw(st.booleans()):
        data = b"\0" * (count * ITEMSIZE.get(dtype, 2))
    else:
        data = draw(st.binary(max_size=64))
    return common_pb2.Tensor(dtype=dtype, shape=shape, data=data)

expected_shapes = st.none() | st.lists(st.none() | st.integers(0, 6), max_size=4)


@pytest.mark.timeout(60)
@FUZZ
@given(tensor=tensors(), shape=expected_shapes,
       dtype=st.sampled_from([None, np.float32, np.int64, np.uint8]))
def test_decode_tensor_raises_only_invalid_argument(tensor: common_pb2.Tensor,
                                                    shape: list[int | None] | None,
                                                    dtype: type | None) -> None:
    try:
        array = decode_tensor(tensor, dtype=dtype, shape=shape)
    except InvalidArgumentError:
        return
    assert array.ndim == len(tensor.shape) <= MAX_DIMS
    assert array.nbytes == len(tensor.data)
    assert math.prod(array.shape) == array.size


@pytest.mark.timeout(60)
@FUZZ
@given(ids=tensors(), rows=tensors(), dim=st.none() | st.integers(0, 4))
def test_decode_sparse_raises_only_invalid_argument(ids: common_pb2.Tensor,
                                                    rows: common_pb2.Tensor,
                                                    dim: int | None) -> None:
    try:
        got_ids, got_rows = decode_sparse(common_pb2.SparseRows(ids=ids, rows=rows), dim=dim)
    except InvalidArgumentError:
        return
    assert got_ids.ndim == 1
    assert got_rows.shape[0] == got_ids.shape[0]
