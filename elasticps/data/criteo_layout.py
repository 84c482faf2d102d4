"""The Criteo layout of the original CTR datasets (format version 1): columns, Parquet types.

One row is one ad impression:

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

NUM_DENSE = 13
NUM_SPARSE = 26
LABEL = "label"
DENSE_COLUMNS: tuple[str, ...] = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))
SPARSE_COLUMNS: tuple[str, ...] = tuple(f"C{i}" for i in range(1, NUM_SPARSE + 1))
FEATURE_COLUMNS: tuple[str, ...] = (LABEL, *DENSE_COLUMNS, *SPARSE_COLUMNS)
P_TRUE = "p_true"

LABEL_TYPE = pa.int8()
DENSE_TYPE = pa.int32()
SPARSE_TYPE = pa.uint32()


def arrow_schema(with_p_true: bool = False) -> pa.Schema:
    """The Parquet schema of a dataset; ``with_p_true`` adds the synthetic probability column."""
    fields = [pa.field(LABEL, LABEL_TYPE, nullable=False)]
    fields += [pa.field(name, DENSE_TYPE) for name in DENSE_COLUMNS]
    fields += [pa.field(name, SPARSE_TYPE) for name in SPARSE_COLUMNS]
    if with_p_true:
        fields.append(pa.field(P_TRUE, pa.float32(), nullable=False))
    return pa.schema(fields)


def schema_description(with_p_true: bool = False) -> list[dict[str, object]]:
    """The schema as JSON-friendly rows for the manifest."""
    return [
        {"name": field.name, "type": str(field.type), "nullable": field.nullable}
        for field in arrow_schema(with_p_true)
    ]
