"""What a model trained on a dataset reads, and how each input was made from a raw value: the
record a model export keeps (``"inputs"`` in its manifest) for scorers that never import
elasticps.

    {"dense": ["age", "income"],             Batch.dense's columns, in the order the model reads
                                             them (the schema's order, never alphabetical)
     "dense_columns": {"age": {"dtype": "float", "norm": "standard", "missing_value": 0.0,
                               "mean": m, "std": s, "min": lo, "max": hi}, ...},
     "categorical": {"country": {"kind": "categorical", "dtype": "string", "table": "features",
                                 "id_space": n, "ids": "hash", "salt": s, "sep": null}, ...},
     "missing": ["", "NA", "?"],             tokens read as missing (a column's own "missing"
                                             replaces them)
     "label": {"names": ["clicked"], "kind": "binary", "width": 1, "classes": null,
               "values": null, "sep": null},
     "weight": null,
     "norms": {norm: formula}, "hash": formula, "binary_words": {...}}

``label.values`` lists a class label's classes in index order: a model's k-th output is the
class ``values[k]`` (null: the index is the class). Sparse layers and the columns each reads
are the export's ``layers``; this record says how those columns' ids were made.
"""

from __future__ import annotations

from typing import Any

from elasticps.data.label_values import FALSE_WORDS, TRUE_WORDS
from elasticps.data.schema import ColumnSpec, Schema

NORMS = {
    "standard": "(x - mean) / std; x - mean when std is 0",
    "minmax": "(clip(x, min, max) - min) / (max - min); 0 when max == min",
    "log": "log(1 + max(x, 0))",
    "none": "x",
}
HASH = ("u = v for an integer 0 <= v < 2**32; 2**32 for a missing value; splitmix64(v mod "
        "2**64) for any other integer; fnv1a64(UTF-8 bytes) for a string (hex32 values hash as "
        "the integer their 8 hex digits spell). id = splitmix64(((salt << 33) XOR u) mod 2**64) "
        "mod id_space. splitmix64(z): z += 0x9E3779B97F4A7C15; z = (z ^ z >> 30) * "
        "0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB; z ^= z >> 31 (mod 2**64). "
        "fnv1a64: basis 0xCBF29CE484222325, prime 0x100000001B3. ids: passthrough takes the "
        "value as the id.")


def model_inputs(schema: Schema) -> dict[str, Any]:
    """The record of the module docstring for data read with ``schema``."""
    first = schema.labels[0]
    return {
        "dense": [column.name for column in schema.dense_columns],
        "dense_columns": {c.name: _dense(c) for c in schema.dense_columns},
        "categorical": {c.name: _categorical(c, schema) for c in schema.categorical_columns},
        "missing": list(schema.missing),
        "label": {"names": [label.name for label in schema.labels], "kind": schema.label_kind,
                  "width": schema.label_width, "classes": first.classes,
                  "values": None if first.values is None else list(first.values),
                  "sep": first.sep},
        "weight": schema.weight,
        "norms": dict(NORMS),
        "hash": HASH,
        "binary_words": {"1": ["1", *TRUE_WORDS], "0": ["0", *FALSE_WORDS]},
    }


def _dense(column: ColumnSpec) -> dict[str, Any]:
    stats = column.stats
    record: dict[str, Any] = {"dtype": column.dtype, "norm": column.norm,
                              "missing_value": column.missing_value}
    for name in ("mean", "std", "min", "max"):
        record[name] = None if stats is None else getattr(stats, name)
    if column.missing is not None:
        record["missing"] = list(column.missing)
    return record


def _categorical(column: ColumnSpec, schema: Schema) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": column.kind, "dtype": column.dtype, "table": column.table,
                              "id_space": schema.tables[column.table].id_space,
                              "ids": column.ids, "salt": column.hash_salt, "sep": column.sep}
    if column.missing is not None:
        record["missing"] = list(column.missing)
    return record
