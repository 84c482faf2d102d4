"""bfloat16 on the wire: the rounding is torch's (nearest, ties to even), widening is exact, a
push's dense part decodes to float32 from either dtype and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2
from elasticps.rpc.codec import (
    bfloat16_bits,
    bfloat16_to_float32,
    decode_float32,
    encode_bfloat16,
    encode_dense,
    encode_tensor,
    round_to_bfloat16,
)

EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 3.3895314e38, 3.4e38,
                  -3.4e38, 1e-40, -1e-45, np.inf, -np.inf, np.finfo(np.float32).max,
                  np.finfo(np.float32).tiny], dtype=np.float32)


def torch_bits(values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_the_rounding_is_torchs_on_random_and_edge_values() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([EDGES, rng.normal(size=20_000).astype(np.float32),
                             (rng.normal(size=5_000) * 1e30).astype(np.float32),
                             rng.integers(0, 2**32, 5_000, dtype=np.uint32).view(np.float32)])
    values = values[~np.isnan(values)]
    np.testing.assert_array_equal(bfloat16_bits(values), torch_bits(values))


def test_ties_go_to_even() -> None:
    # 1 + 2**-8 lies halfway between 1 and 1 + 2**-7: even (1) wins; 1 + 3 * 2**-8 halfway
    # between 1 + 2**-7 and 1 + 2**-6: even (1 + 2**-6) wins.
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8], dtype=np.float32)
    np.testing.assert_array_equal(round_to_bfloat16(halfway), [1.0, 1 + 2**-6])


def test_nan_stays_nan() -> None:
    nans = np.array([np.nan, -np.nan], dtype=np.float32)
    nans[1:] = np.uint32(0xFFFFFFFF).view(np.float32)  # the pattern that wraps on rounding
    assert np.isnan(bfloat16_to_float32(bfloat16_bits(nans))).all()


def test_representable_values_come_back_exactly_and_shape_is_kept() -> None:
    values = round_to_bfloat16(np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32))
    assert values.shape == (3, 5)
    np.testing.assert_array_equal(round_to_bfloat16(values), values)
    tensor = encode_bfloat16(values)
    assert tensor.dtype == common_pb2.BFLOAT16
    assert len(tensor.data) == values.size * 2  # half of float32's bytes
    np.testing.assert_array_equal(decode_float32(tensor, name="g"), values)


def test_a_float32_tensor_decodes_as_it_is_and_other_dtypes_are_refused() -> None:
    values = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(decode_float32(encode_tensor(values)), values)
    with pytest.raises(InvalidArgumentError,
                       match=r"dense\['w'\] has dtype INT32, expected FLOAT32 or BFLOAT16"):
        decode_float32(encode_tensor(np.arange(4, dtype=np.int32)), name="dense['w']")


def test_a_dense_part_travels_as_its_dtype_says() -> None:
    values = np.linspace(-1, 1, 11, dtype=np.float32)
    assert encode_dense(values, "float32") == encode_tensor(values)
    assert encode_dense(values, "bfloat16") == encode_bfloat16(values)
