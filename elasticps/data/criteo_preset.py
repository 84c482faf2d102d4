"""The Criteo layout as a declared schema: how format-1 datasets read, and a preset for users.

Format-1 datasets (``"elasticps-ctr"``, written by ``elasticps data synth ctr`` and ``convert
criteo``) have no schema in their manifest; they read as :func:`criteo_preset`: a binary
``label``, 13 dense integer columns ``I1..I13`` and 26 categorical integer columns
``C1..C26`` hashed into one table with the salts 0..25, which makes the general hash
(:mod:`elasticps.data.hashing`) give exactly the per-slot ids of :mod:`elasticps.data.features`.
A :class:`~elasticps.data.features.FeatureConfig` (``id_space``, ``dense_norm``) picks the
preset's table size and dense normalisation:

==============  ========================================================================
dense_norm      preset columns
==============  ========================================================================
``minmax``      ``norm: minmax`` with the classic demo's clip range as ``stats`` min/max
``log``         ``norm: log``
``none``        ``norm: none``
``log-missing`` ``norm: log`` with ``missing_value: -1.0``
==============  ========================================================================

Pure Python (no numpy or pyarrow): the master reads manifests without loading either.
"""

from __future__ import annotations

from elasticps.data.schema import (
    DEFAULT_TABLE,
    ColumnSpec,
    DenseStats,
    LabelSpec,
    Schema,
    TableDecl,
)
from elasticps.errors import ConfigError

NUM_DENSE = 13
NUM_SPARSE = 26
LABEL = "label"
DENSE_COLUMNS: tuple[str, ...] = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))
SPARSE_COLUMNS: tuple[str, ...] = tuple(f"C{i}" for i in range(1, NUM_SPARSE + 1))
FEATURE_COLUMNS: tuple[str, ...] = (LABEL, *DENSE_COLUMNS, *SPARSE_COLUMNS)

DENSE_NORMS = ("minmax", "log", "none", "log-missing")
DEFAULT_ID_SPACE = 1_000_001  # the classic demo's sparse_feature_dim
DEFAULT_DIM = 10  # the CTR demo's embedding width
# The classic demo's clip range per dense column (about the 95th percentile of each).
CLIP_MIN = (0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
CLIP_MAX = (20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50)


def criteo_preset(id_space: int = DEFAULT_ID_SPACE, dense_norm: str = "minmax", *,
                  table: str = DEFAULT_TABLE, dim: int = DEFAULT_DIM) -> Schema:
    """The Criteo layout as a schema, with ``FeatureConfig``'s id space and dense norm."""
    if dense_norm not in DENSE_NORMS:
        raise ConfigError(f"dense_norm={dense_norm!r} is not one of {', '.join(DENSE_NORMS)}")
    norm = "log" if dense_norm == "log-missing" else dense_norm
    missing_value = -1.0 if dense_norm == "log-missing" else 0.0
    dense = tuple(
        ColumnSpec(name, "dense", dtype="int", norm=norm, missing_value=missing_value,
                   stats=DenseStats(min=float(lo), max=float(hi)) if norm == "minmax" else None)
        for name, lo, hi in zip(DENSE_COLUMNS, CLIP_MIN, CLIP_MAX, strict=True))
    sparse = tuple(ColumnSpec(name, "categorical", dtype="int", table=table, salt=slot)
                   for slot, name in enumerate(SPARSE_COLUMNS))
    return Schema(labels=(LabelSpec(LABEL),), columns=dense + sparse,
                  tables={table: TableDecl(table, dim, id_space)})
