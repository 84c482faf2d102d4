"""One chunk's Arrow table -> a :class:`~elasticps.data.batch.Batch`, as the schema declares.

Whole columns at a time (no Python per row): dense columns are normalised from the schema's
statistics, categorical columns hashed into their table's id space (or checked, for
``ids: passthrough``), multi-valued columns become bags, text columns bags of their words'
ids (:mod:`~elasticps.data.tokenize`), dense_vector columns float32 matrices, labels take
their kind's shape. Every
problem with the data (a column of the wrong type, a null where none may be, an id or class
out of range) is a :class:`DataError` that names the file and the column: the trainer's task
loop turns it into a failed task, counted by the master.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data.arrow_numpy import bool_numpy, fixed_width_numpy, int_numpy
from elasticps.data.batch import Bag, Batch
from elasticps.data.hashing import MISSING_KEY, hash_keys, int_keys, string_keys
from elasticps.data.label_values import class_indices
from elasticps.data.normalize import normalize_column
from elasticps.data.schema import ColumnSpec, LabelSpec, Schema
from elasticps.data.tokenize import words
from elasticps.errors import DataError


def decode_table(table: pa.Table, schema: Schema, where: str) -> Batch:
    """The rows of ``table`` (the chunk, already sliced or permuted) as one batch; ``where``
    names the file (and chunk) in errors."""
    weight = None
    if schema.weight is not None:
        values, missing = numeric_column(table, schema.weight, where)
        if missing.any():
            raise DataError(f"{where}: column {schema.weight!r} (the weight) has a missing value")
        weight = values.astype(np.float32)
    features = decode_features(table, schema, where)
    return dataclasses.replace(features, label=_labels(table, schema, where), weight=weight)


def decode_features(table: pa.Table, schema: Schema, where: str) -> Batch:
    """The feature columns of ``table`` as a batch, for rows that carry no label (rows to
    score): hashed and normalised exactly as :func:`decode_table` does; the label is zeros of
    the schema's label width, the weight None."""
    n = table.num_rows
    dense_columns = schema.dense_columns
    dense = np.empty((n, len(dense_columns)), dtype=np.float32)
    for j, spec in enumerate(dense_columns):
        values, missing = numeric_column(table, spec.name, where)
        dense[:, j] = normalize_column(values, missing, spec)
    ids: dict[str, np.ndarray] = {}
    bags: dict[str, Bag] = {}
    for spec in schema.categorical_columns:
        id_space = schema.tables[spec.table].id_space
        array = _array(table, spec.name)
        if spec.kind == "categorical":
            ids[spec.name] = _ids(array, spec, id_space, where)
        elif spec.kind == "text":
            bags[spec.name] = _words_bag(array, spec, id_space, where)
        else:
            bags[spec.name] = _bag(array, spec, id_space, where)
    vectors = {spec.name: _vectors(_array(table, spec.name), spec, where)
               for spec in schema.vector_columns}
    width = schema.label_width
    label = np.zeros((n,) if width == 1 else (n, width), dtype=np.float32)
    return Batch(label=label, dense=dense, dense_names=tuple(c.name for c in dense_columns),
                 ids=ids, bags=bags, vectors=vectors)


def _array(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _type_error(where: str, name: str, array: pa.Array, wanted: str) -> DataError:
    return DataError(f"{where}: column {name!r} holds {array.type}; the manifest declares "
                     f"{wanted}")


def numeric_column(table: pa.Table, name: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, missing) of a number column, straight from the Arrow buffers where it can.

    Values in null slots are whatever the buffer holds; every user masks them with ``missing``.
    """
    array = _array(table, name)
    if pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise _type_error(where, name, array, "a number column")
    return fixed_width_numpy(array)


def _keys(array: pa.Array, spec: ColumnSpec, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(keys u, missing) of a single-valued categorical array (see elasticps.data.hashing)."""
    kind = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        missing = _null_mask(array)
        return string_keys(array), missing
    if pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    if not pa.types.is_integer(array.type):
        raise _type_error(where, spec.name, array, "a categorical column of integers or strings")
    values, missing = fixed_width_numpy(array)
    return int_keys(values), missing


def _null_mask(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.zeros(len(array), dtype=bool)
    return bool_numpy(array.is_null())


def _passthrough(array: pa.Array, spec: ColumnSpec, id_space: int, where: str) -> np.ndarray:
    if not pa.types.is_integer(array.type):
        raise _type_error(where, spec.name, array, "passthrough ids (integers)")
    values, missing = fixed_width_numpy(array)
    if missing.any():
        raise DataError(f"{where}: column {spec.name!r} (ids: passthrough) has a missing id at "
                        f"row {int(np.argmax(missing))}")
    ids = values.astype(np.int64)
    bad = (ids < 0) | (ids >= id_space)
    if values.dtype.kind == "u" and values.dtype.itemsize == 8:
        bad |= values >= np.uint64(1 << 63)
    if bad.any():
        row = int(np.argmax(bad))
        raise DataError(f"{where}: column {spec.name!r} (ids: passthrough) holds the id "
                        f"{values[row]} at row {row}, outside its table's [0, {id_space})")
    return ids


def _ids(array: pa.Array, spec: ColumnSpec, id_space: int, where: str) -> np.ndarray:
    if spec.ids == "passthrough":
        return _passthrough(array, spec, id_space, where)
    keys, missing = _keys(array, spec, where)
    if missing.any():
        keys = np.where(missing, np.uint64(MISSING_KEY), keys)
    return hash_keys(keys, spec.hash_salt, id_space)


def _bag(array: pa.Array, spec: ColumnSpec, id_space: int, where: str) -> Bag:
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise _type_error(where, spec.name, array, "a multi_categorical (list) column")
    n = len(array)
    values = pc.list_flatten(array)  # the values of the non-null lists, in row order
    rows = int_numpy(pc.list_parent_indices(array))
    if values.null_count:  # a missing element is no element
        keep = values.is_valid()
        values = values.filter(keep)
        rows = rows[bool_numpy(keep)]
    if spec.ids == "passthrough":
        ids = _passthrough(values, spec, id_space, where)
    else:
        keys, _ = _keys(values, spec, where)
        ids = hash_keys(keys, spec.hash_salt, id_space)
    return Bag(values=ids, offsets=_offsets(rows, n))


def _offsets(rows: np.ndarray, n: int) -> np.ndarray:
    """Bag offsets [n + 1] of values whose rows (ascending) are ``rows``."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return offsets


def _words_bag(array: pa.Array, spec: ColumnSpec, id_space: int, where: str) -> Bag:
    """A text column as a bag of its words' ids (a missing text: an empty bag)."""
    kind = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise _type_error(where, spec.name, array, "a text (string) column")
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    values, rows = words(array)
    ids = hash_keys(string_keys(values), spec.hash_salt, id_space)
    return Bag(values=ids, offsets=_offsets(rows, len(array)))


def _vectors(array: pa.Array, spec: ColumnSpec, where: str) -> np.ndarray:
    """A dense_vector column as float32 [n, length]; a missing vector reads as zeros."""
    length = int(spec.length or 0)
    if not pa.types.is_fixed_size_list(array.type) or array.type.list_size != length or not (
            pa.types.is_floating(array.type.value_type)):
        raise _type_error(where, spec.name, array, f"a dense_vector of length {length} "
                          "(fixed_size_list<float32>)")
    n = len(array)
    values, holes = fixed_width_numpy(array.values.slice(array.offset * length, n * length))
    out = values.astype(np.float32).reshape(n, length)
    missing = _null_mask(array)  # a missing vector's slots may hold anything, nulls included
    holes = holes.reshape(n, length) & ~missing[:, None]
    if holes.any():
        row = int(np.argmax(holes.any(axis=1)))
        raise DataError(f"{where}: column {spec.name!r} (dense_vector) has a missing value "
                        f"inside the vector at row {row}")
    if missing.any():
        out[missing] = 0.0
    return out


def _labels(table: pa.Table, schema: Schema, where: str) -> np.ndarray:
    if schema.label_kind == "multi_label":
        return _multi_hot(table, schema.labels[0], where)
    columns = [_label(table, spec, where) for spec in schema.labels]
    return columns[0] if len(columns) == 1 else np.stack(columns, axis=1)


def _label(table: pa.Table, spec: LabelSpec, where: str) -> np.ndarray:
    if spec.by_value:
        return _class_by_value(table, spec, where)
    values, missing = numeric_column(table, spec.name, where)
    if missing.any():
        raise DataError(f"{where}: label column {spec.name!r} has a missing value at row "
                        f"{int(np.argmax(missing))}")
    if spec.kind == "binary":
        _check_range(values, (values != 0) & (values != 1), spec, where, "0 or 1")
    elif spec.kind == "class":
        classes = int(spec.classes or 0)
        _check_range(values, (values < 0) | (values >= classes) | (values != np.floor(values)),
                     spec, where, f"a class in [0, {classes})")
    return values.astype(np.float32)


def _class_by_value(table: pa.Table, spec: LabelSpec, where: str) -> np.ndarray:
    """A class label stored as its values: each row's index among the manifest's classes."""
    array = _array(table, spec.name)
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        raise _type_error(where, spec.name, array, "a class label by value (strings)")
    if spec.values is None:
        raise DataError(f"{where}: label column {spec.name!r} is a class label whose classes "
                        "the manifest does not list")
    indices, unknown = class_indices(array, spec.values)
    if unknown.any():
        row = int(np.argmax(unknown))
        raise DataError(f"{where}: label column {spec.name!r} holds {array[row].as_py()!r} at "
                        f"row {row}, which is not one of its {len(spec.values)} classes")
    return indices.astype(np.float32)


def _check_range(values: np.ndarray, bad: Any, spec: LabelSpec, where: str, wanted: str) -> None:
    if np.any(bad):
        row = int(np.argmax(bad))
        raise DataError(f"{where}: label column {spec.name!r} holds {values[row]} at row {row}, "
                        f"expected {wanted}")


def _multi_hot(table: pa.Table, spec: LabelSpec, where: str) -> np.ndarray:
    array = _array(table, spec.name)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) or not (
            pa.types.is_integer(array.type.value_type)):
        raise _type_error(where, spec.name, array, "a multi_label column (lists of classes)")
    classes = int(spec.classes or 0)
    values = pc.list_flatten(array)
    rows = int_numpy(pc.list_parent_indices(array))
    labels, missing = fixed_width_numpy(values)
    labels, rows = labels[~missing].astype(np.int64), rows[~missing]
    _check_range(labels, (labels < 0) | (labels >= classes), spec, where,
                 f"classes in [0, {classes})")
    out = np.zeros((len(array), classes), dtype=np.float32)
    out[rows, labels] = 1.0
    return out
