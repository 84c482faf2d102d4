"""Arrow arrays as numpy arrays, read straight from their buffers.

pyarrow's own ways (``to_numpy(zero_copy_only=False)``, ``fill_null`` with a Python value,
``pa.array`` of a numpy array) go through its pandas shim, which imports pandas: a third of a
second of a trainer's start, for arrays these few lines read without copying.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def fixed_width_numpy(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, missing) of a fixed-width Arrow array, as zero-copy numpy views.

    Values in null slots are whatever the buffer holds; every user masks them with ``missing``.
    """
    n = len(array)
    dtype = np.dtype(array.type.to_pandas_dtype())
    validity, data = array.buffers()[:2]
    values = np.frombuffer(data, dtype=dtype, count=n, offset=array.offset * dtype.itemsize)
    if array.null_count == 0 or validity is None:
        return values, np.zeros(n, dtype=bool)
    return values, ~_bits(validity, array.offset, n)


def bool_numpy(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy booleans; a null reads as False."""
    n = len(array)
    validity, data = array.buffers()[:2]
    values = _bits(data, array.offset, n)
    if array.null_count and validity is not None:
        values &= _bits(validity, array.offset, n)
    return values


def int_numpy(array: pa.Array, fill: int = 0) -> np.ndarray:
    """An integer Arrow array as numpy, ``fill`` in its null slots."""
    values, missing = fixed_width_numpy(array)
    return np.where(missing, fill, values) if missing.any() else values


def _bits(buffer: pa.Buffer, offset: int, n: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")
    return bits[offset:offset + n].astype(bool)
