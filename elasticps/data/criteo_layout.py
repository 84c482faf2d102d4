"""The Criteo layout of the original CTR datasets (format version 1): columns, Parquet types.

One row is one ad impression. The types are those the Criteo preset's dtypes are stored as
(:mod:`elasticps.data.storage`), so a converted Criteo dataset (format 2) stores the same:

========  ===========  =====================================================================
column    Parquet type meaning
========  ===========  =====================================================================
label     int8         1 = clicked, 0 = not clicked (never null)
I1..I13   int32        integer count features; may be negative; null = missing
C1..C26   uint32       categorical features: Criteo's 8 hex digits parsed as a number; null =
                       missing
p_true    float32      synthetic datasets only: the planted model's click probability
========  ===========  =====================================================================

Storing the categoricals as uint32 rather than 8-character strings halves their size on disk
and lets readers hash them without touching Python strings. Parsing is lossless: the hex text
is ``format(value, "08x")``.
"""

from __future__ import annotations

import pyarrow as pa

from elasticps.data import storage
from elasticps.data.criteo_schema import (
    DENSE_COLUMNS,
    FEATURE_COLUMNS,
    LABEL,
    NUM_DENSE,
    NUM_SPARSE,
    SPARSE_COLUMNS,
    criteo_preset,
)

__all__ = [
    "DENSE_COLUMNS", "DENSE_TYPE", "FEATURE_COLUMNS", "LABEL", "LABEL_TYPE", "NUM_DENSE",
    "NUM_SPARSE", "P_TRUE", "SPARSE_COLUMNS", "SPARSE_TYPE", "arrow_schema",
    "schema_description",
]

P_TRUE = "p_true"

_STORED = storage.arrow_schema(criteo_preset())
LABEL_TYPE = _STORED.field(LABEL).type  # int8
DENSE_TYPE = _STORED.field(DENSE_COLUMNS[0]).type  # int32
SPARSE_TYPE = _STORED.field(SPARSE_COLUMNS[0]).type  # uint32


def arrow_schema(with_p_true: bool = False) -> pa.Schema:
    """The Parquet schema of a dataset; ``with_p_true`` adds the synthetic probability column."""
    if with_p_true:
        return _STORED.append(pa.field(P_TRUE, pa.float32(), nullable=False))
    return _STORED


def schema_description(with_p_true: bool = False) -> list[dict[str, object]]:
    """The schema as JSON-friendly rows for the manifest."""
    return [
        {"name": field.name, "type": str(field.type), "nullable": field.nullable}
        for field in arrow_schema(with_p_true)
    ]
