"""How a format-2 dataset stores each declared column in Parquet.

Values are stored as they were read (typed, never hashed or normalised), so the id spaces and
normalisations in the manifest's schema apply at read time, and a dataset reads the same as its
manifest says:

=====================================  ==========================================================
column                                 Parquet (Arrow) type; null = missing
=====================================  ==========================================================
label, binary                          int8 (0/1), never null
label, float                           float32, never null
label, class by value                  string: the class value (an integer as its digits)
label, class with ``classes: N``       int32 class index, never null
label, multi_label                     list<int32> of class indices (an empty list: no class)
weight                                 float32, never null
dense, dtype int / int32 / float       int64 / int32 / float64
categorical, dtype int / int32         int64 / int32
categorical, dtype string / hex32      string / uint32 (the 32-bit value the 8 hex digits spell)
multi_categorical                      a list of the categorical type of its dtype (null: none)
text                                   string, as read (tokenized when read: ``tokenize.py``)
dense_vector                           fixed_size_list<float32>[length] (null: missing)
=====================================  ==========================================================
"""

from __future__ import annotations

import pyarrow as pa

from elasticps.data.schema import ColumnSpec, LabelSpec, Schema
from elasticps.errors import ConfigError

LABEL_TYPES = {"binary": pa.int8(), "float": pa.float32(), "class": pa.int32(),
               "multi_label": pa.list_(pa.int32())}
WEIGHT_TYPE = pa.float32()
_SCALAR = {"int": pa.int64(), "int32": pa.int32(), "float": pa.float64(), "string": pa.string(),
           "hex32": pa.uint32()}


def label_type(spec: LabelSpec) -> pa.DataType:
    return pa.string() if spec.by_value else LABEL_TYPES[spec.kind]


def column_type(spec: ColumnSpec) -> pa.DataType:
    """The stored type of a feature column whose dtype is decided."""
    if spec.dtype is None:
        raise ConfigError(f"column {spec.name!r} has no dtype yet")
    if spec.kind == "dense_vector":
        return pa.list_(pa.float32(), spec.length)
    scalar = _SCALAR[spec.dtype]
    return pa.list_(scalar) if spec.kind == "multi_categorical" else scalar


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Parquet schema of a dataset with ``schema`` (every dtype decided), in the order of
    :meth:`Schema.source_columns`."""
    fields = [pa.field(spec.name, label_type(spec), nullable=spec.kind == "multi_label")
              for spec in schema.labels]
    if schema.weight is not None:
        fields.append(pa.field(schema.weight, WEIGHT_TYPE, nullable=False))
    fields += [pa.field(spec.name, column_type(spec)) for spec in schema.columns]
    return pa.schema(fields)
