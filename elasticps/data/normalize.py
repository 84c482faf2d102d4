"""Dense normalisation of one column, as its schema declares, from the statistics measured at
conversion (``ColumnSpec.stats``):

==========  ===================================================================================
norm        value
==========  ===================================================================================
standard    ``(x - mean) / std`` (``x - mean`` when ``std`` is 0)
minmax      ``(clip(x, min, max) - min) / (max - min)``, in [0, 1] (0 when ``max == min``)
log         ``log(1 + max(x, 0))``
none        ``x``
==========  ===================================================================================

A missing value becomes ``missing_value`` (after normalisation, so it is a model input as is).
The arithmetic runs in the precision the column is stored in (float32 for 32-bit columns, such
as format 1's int32 counts, so those read exactly as before; float64 for the 64-bit columns
format 2 stores, so large values such as timestamps keep their differences), and the result is
rounded to float32.
"""

from __future__ import annotations

import numpy as np

from elasticps.data.schema import ColumnSpec, DenseStats
from elasticps.errors import DataError


def normalize_column(values: np.ndarray, missing: np.ndarray, column: ColumnSpec) -> np.ndarray:
    """``values`` (any numeric dtype, [n]) normalised as ``column`` declares, float32 [n]."""
    work = np.float32 if values.dtype.itemsize <= 4 else np.float64
    x = values.astype(work)
    if column.norm in ("standard", "minmax"):
        stats = column.stats
        if stats is None:
            raise DataError(f"dense column {column.name!r} normalises by {column.norm} but "
                            "the schema has no statistics for it")
        x = _by_stats(x, column.norm, stats, work)
    elif column.norm == "log":
        x = np.log1p(np.maximum(x, work(0.0)))
    elif column.norm != "none":
        raise DataError(f"dense column {column.name!r} has an unknown norm {column.norm!r}")
    x[missing] = column.missing_value
    return x.astype(np.float32, copy=False)


def _by_stats(x: np.ndarray, norm: str, stats: DenseStats, work: type[np.floating]) -> np.ndarray:
    if norm == "standard":
        x -= work(stats.mean)
        if stats.std > 0:
            x /= work(stats.std)
        return x
    low, high = work(stats.min), work(stats.max)
    if not high > low:
        return np.zeros_like(x)
    return (np.clip(x, low, high) - low) / (high - low)
