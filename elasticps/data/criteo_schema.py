"""The Criteo layout as a declared schema: what ``convert criteo`` declares, how format 1 reads.

:func:`criteo_preset` is a binary ``label``, 13 dense ``int32`` columns ``I1..I13`` and 26
categorical ``hex32`` columns ``C1..C26`` (Criteo's 8 hex digits) hashed into one table with the
salts 0..25, which makes the general hash (:mod:`elasticps.data.hashing`) give exactly the
per-slot ids of :mod:`elasticps.data.features`; only an empty field is missing. Stored, that is
int8, int32 and uint32 columns (:mod:`elasticps.data.storage`): the Parquet layout of format 1.

``elasticps data convert criteo`` converts text with this schema (a format-2 dataset that
declares it, the dense norm and the id space chosen at conversion). Format-1 datasets
(``"elasticps-ctr"``, written by ``elasticps data synth ctr``) have no schema in their manifest;
they read as this preset with a :class:`~elasticps.data.features.FeatureConfig`'s
``id_space`` and ``dense_norm``; :func:`preset_options` finds them again in a schema.
The ``dense_norm`` names map to the preset's columns so:

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

import dataclasses

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
# What `convert criteo` declares unless told otherwise: log(1 + x) of the counts and -1 for a
# missing one, so that a model tells "missing" from 0 (what the CTR example trains with).
CONVERT_DENSE_NORM = "log-missing"
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
        ColumnSpec(name, "dense", dtype="int32", norm=norm, missing_value=missing_value,
                   stats=DenseStats(min=float(lo), max=float(hi)) if norm == "minmax" else None)
        for name, lo, hi in zip(DENSE_COLUMNS, CLIP_MIN, CLIP_MAX, strict=True))
    sparse = tuple(ColumnSpec(name, "categorical", dtype="hex32", table=table, salt=slot)
                   for slot, name in enumerate(SPARSE_COLUMNS))
    return Schema(labels=(LabelSpec(LABEL),), columns=dense + sparse,
                  tables={table: TableDecl(table, dim, id_space)}, missing=("",))


def preset_options(schema: Schema) -> tuple[int, str] | None:
    """``(id_space, dense_norm)`` when ``schema`` is :func:`criteo_preset` with them (as a
    converted Criteo dataset declares it: with statistics measured for the norms that do not
    use any), else None."""
    if len(schema.tables) != 1:
        return None
    (table,) = schema.tables.values()
    for dense_norm in DENSE_NORMS:
        preset = criteo_preset(table.id_space, dense_norm, table=table.name, dim=table.dim)
        if _as_read(schema) == _as_read(preset):
            return table.id_space, dense_norm
    return None


def _as_read(schema: Schema) -> Schema:
    """``schema`` without the statistics its norms do not read (log and none read none)."""
    columns = tuple(
        dataclasses.replace(column, stats=None)
        if column.kind == "dense" and column.norm not in ("standard", "minmax") else column
        for column in schema.columns)
    return dataclasses.replace(schema, columns=columns)
