"""Tensor codec: numpy arrays <-> ``common_pb2.Tensor`` as raw little-endian bytes.

No pickle and no per-element encoding: an array becomes (dtype, shape, bytes). Encoding costs
one copy (protobuf owns its bytes); decoding returns a read-only ``np.frombuffer`` view over the
message's bytes, so it costs none. Every decode validates dtype, shape and byte length against
what the caller expects and raises :class:`~elasticps.errors.InvalidArgumentError` naming the
field, so servers can reject bad input before touching state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.proto import common_pb2

WireDType: TypeAlias = common_pb2.DType.ValueType

_TO_WIRE: dict[np.dtype, WireDType] = {
    np.dtype("<f4"): common_pb2.FLOAT32,
    np.dtype("<f8"): common_pb2.FLOAT64,
    np.dtype("<f2"): common_pb2.FLOAT16,
    np.dtype("i1"): common_pb2.INT8,
    np.dtype("<i2"): common_pb2.INT16,
    np.dtype("<i4"): common_pb2.INT32,
    np.dtype("<i8"): common_pb2.INT64,
    np.dtype("u1"): common_pb2.UINT8,
    np.dtype("?"): common_pb2.BOOL,
}
_FROM_WIRE: dict[WireDType, np.dtype] = {wire: dtype for dtype, wire in _TO_WIRE.items()}
# bfloat16 has no numpy dtype: it travels as its raw 16-bit pattern and decodes to uint16 bits.
_FROM_WIRE[common_pb2.BFLOAT16] = np.dtype("<u2")

MAX_ELEMENTS = 1 << 34  # a sanity bound on declared shapes; message-size limits bind first
MAX_DIMS = 32  # numpy's own limit is 64; no tensor of ours has more than a few


def wire_dtype(dtype: np.dtype | type) -> WireDType:
    """The wire enum for a numpy dtype; InvalidArgumentError for unsupported ones."""
    normalized = np.dtype(dtype)
    if normalized.itemsize > 1:
        normalized = normalized.newbyteorder("<")
    try:
        return _TO_WIRE[normalized]
    except KeyError:
        raise InvalidArgumentError(
            f"dtype {np.dtype(dtype)} cannot be sent over the wire"
        ) from None


def encode_tensor(array: np.ndarray) -> common_pb2.Tensor:
    """Encode ``array`` as (dtype, shape, little-endian C-order bytes)."""
    array = np.asarray(array)
    wire = wire_dtype(array.dtype)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    # tobytes() makes the one copy protobuf needs anyway (it also linearises non-contiguous views).
    return common_pb2.Tensor(dtype=wire, shape=array.shape, data=array.tobytes(order="C"))


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """The bfloat16 nearest each float32 value (ties to even, as torch rounds), as its 16-bit
    pattern: the top half of the float32 after rounding. NaN stays a (quiet) NaN; a finite value
    past bfloat16's range becomes an infinity, which the trainer's finite check then drops."""
    floats = np.ascontiguousarray(values, dtype=np.float32)
    bits = floats.view(np.uint32)
    # Adding 0x7FFF plus the kept part's lowest bit rounds half to even; uint32 wraps only
    # for NaN patterns, which are set below.
    out = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    nan = np.isnan(floats)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | np.uint32(0x0040)).astype(np.uint16)
    return out


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact: bfloat16 is float32's top half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (still float32): what a bfloat16 push
    delivers, so a trainer's own replica can apply the very values the pservers apply."""
    return bfloat16_to_float32(bfloat16_bits(values)).reshape(np.shape(values))


def encode_bfloat16(array: np.ndarray) -> common_pb2.Tensor:
    """Encode float32 ``array`` as bfloat16 (half the bytes; each value rounded to nearest)."""
    array = np.asarray(array, dtype=np.float32)
    return common_pb2.Tensor(dtype=common_pb2.BFLOAT16, shape=array.shape,
                             data=bfloat16_bits(array).tobytes(order="C"))


def encode_dense(array: np.ndarray, dtype: str) -> common_pb2.Tensor:
    """Float32 values as ``dtype`` says they travel: "float32" as they are, "bfloat16" rounded
    to half the bytes."""
    return encode_bfloat16(array) if dtype == "bfloat16" else encode_tensor(array)


def decode_float32(tensor: common_pb2.Tensor, *, name: str = "tensor") -> np.ndarray:
    """A FLOAT32 tensor as it is, a BFLOAT16 one widened to float32; any other dtype refused."""
    if tensor.dtype == common_pb2.BFLOAT16:
        return bfloat16_to_float32(decode_tensor(tensor, name=name))
    if tensor.dtype != common_pb2.FLOAT32:
        shown = (common_pb2.DType.Name(tensor.dtype) if tensor.dtype in common_pb2.DType.values()
                 else str(tensor.dtype))
        raise InvalidArgumentError(f"{name} has dtype {shown}, expected FLOAT32 or BFLOAT16")
    return decode_tensor(tensor, dtype=np.float32, name=name)


def _check_shape(
    name: str, actual: tuple[int, ...], expected: Sequence[int | None] | None
) -> None:
    if expected is None:
        return
    if len(actual) != len(expected) or any(
        want is not None and want != got for want, got in zip(expected, actual, strict=False)
    ):
        shown = ", ".join("*" if want is None else str(want) for want in expected)
        if len(expected) == 1:
            shown += ","
        raise InvalidArgumentError(
            f"{name} has shape {actual}, expected ({shown})"
        )


def decode_tensor(
    tensor: common_pb2.Tensor,
    *,
    dtype: np.dtype | type | None = None,
    shape: Sequence[int | None] | None = None,
    name: str = "tensor",
) -> np.ndarray:
    """Decode to a read-only array viewing the message bytes.

    ``dtype`` (if given) must match exactly; ``shape`` may use None as a wildcard dimension.
    """
    wire_np = _FROM_WIRE.get(tensor.dtype)
    if wire_np is None:
        raise InvalidArgumentError(
            f"{name} has unknown or unset dtype {tensor.dtype}"
        )
    if dtype is not None and wire_dtype(dtype) != tensor.dtype:
        raise InvalidArgumentError(
            f"{name} has dtype {common_pb2.DType.Name(tensor.dtype)}, "
            f"expected {common_pb2.DType.Name(wire_dtype(dtype))}",
        )
    if len(tensor.shape) > MAX_DIMS:
        raise InvalidArgumentError(f"{name} has {len(tensor.shape)} dimensions; at most "
                                   f"{MAX_DIMS}")
    dims = tuple(int(d) for d in tensor.shape)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{name} has a negative dimension in {dims}")
    # The product of the non-zero dimensions is bounded too: a zero beside huge dimensions
    # makes the count 0, and numpy refuses such a shape with a ValueError of its own.
    if any(d > MAX_ELEMENTS for d in dims) or math.prod(d for d in dims if d) > MAX_ELEMENTS:
        raise InvalidArgumentError(f"{name} has dimensions {dims}: more than {MAX_ELEMENTS} "
                                   "elements")
    count = math.prod(dims)
    if len(tensor.data) != count * wire_np.itemsize:
        raise InvalidArgumentError(
            f"{name} carries {len(tensor.data)} bytes but shape {dims} of "
            f"{common_pb2.DType.Name(tensor.dtype)} needs {count * wire_np.itemsize}",
        )
    _check_shape(name, dims, shape)
    return np.frombuffer(tensor.data, dtype=wire_np).reshape(dims)


def encode_sparse(ids: np.ndarray, rows: np.ndarray) -> common_pb2.SparseRows:
    """Encode sparse rows; ``ids`` is int64 [n], ``rows`` is [n, dim]."""
    ids = np.asarray(ids)
    rows = np.asarray(rows)
    if ids.ndim != 1 or rows.ndim != 2 or rows.shape[0] != ids.shape[0]:
        raise InvalidArgumentError(
            f"sparse rows need ids [n] and rows [n, dim], got {ids.shape} and {rows.shape}",
        )
    return common_pb2.SparseRows(
        ids=encode_tensor(ids.astype(np.int64, copy=False)), rows=encode_tensor(rows)
    )


def decode_sparse(
    message: common_pb2.SparseRows,
    *,
    dim: int | None = None,
    dtype: np.dtype | type | None = None,
    name: str = "sparse",
) -> tuple[np.ndarray, np.ndarray]:
    """Decode sparse rows, checking ids are int64 [n] and rows are [n, dim]."""
    ids = decode_tensor(message.ids, dtype=np.int64, shape=(None,), name=f"{name}.ids")
    rows = decode_tensor(message.rows, dtype=dtype, shape=(ids.shape[0], dim),
                         name=f"{name}.rows")
    return ids, rows
