"""Reading and writing whole rows of a table's arrays by row number, without numpy's general
fancy indexing.

``a[rows]`` and ``a[rows] = b`` on a 2-D array go through numpy's general index machinery,
which copies each row's elements one by one; a push's 12k rows of a CTR table (values and two
Adam slots each read and written) spend most of the pserver's table time there. ``take`` along
the first axis, and an assignment through a view that makes each row one fixed-size element,
copy a row as one block, the same bytes (``tests/unit/pserver/test_row_access.py``); the
speed-up is in ``benchmarks/results.md`` (``benchmarks/pserver_throughput.py``).
"""

from __future__ import annotations

import numpy as np


def take_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` (a new array) for integer ``rows``, copying whole rows at once."""
    return array.take(rows, axis=0)


def put_rows(array: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``array[rows] = values`` for distinct integer ``rows``, each row written as one block
    where both arrays are C-contiguous with the same row shape (numpy's assignment otherwise)."""
    if (array.ndim == 2 and values.shape == (rows.shape[0], array.shape[1])
            and array.dtype == values.dtype and array.flags.c_contiguous
            and values.flags.c_contiguous and array.shape[1] > 0):
        row = np.dtype((np.void, array.dtype.itemsize * array.shape[1]))
        array.view(row).reshape(-1)[rows] = values.view(row).reshape(-1)
    else:
        array[rows] = values
