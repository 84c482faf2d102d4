"""One block of source rows -> the stored table of its good rows, and its bad rows with reasons.

Every converter and :func:`elasticps.data.write_dataset` hands its blocks here, so every input
is validated by the same rules (:mod:`elasticps.data.parse_values` for the values; here what
each column kind and label kind allows). A row is bad when any of its columns is; it is
reported once, with the first bad column in schema order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data import label_values as lv
from elasticps.data import parse_values as pv
from elasticps.data.schema import ColumnSpec, LabelSpec, Schema
from elasticps.data.storage import WEIGHT_TYPE, arrow_schema, column_type, label_type


@dataclass(frozen=True)
class CheckedBlock:
    """The good rows as a table of the stored schema; bad rows as (row, column, reason)."""

    table: pa.Table
    bad_rows: np.ndarray  # block-local indices, ascending
    reasons: list[tuple[int, str, str]]  # the first ``max_reasons`` bad rows


@dataclass(frozen=True)
class _Checked:
    array: pa.Array
    bad: np.ndarray
    describe: pv.Describe


def check_block(columns: Mapping[str, pa.Array], schema: Schema, *,
                max_reasons: int = 20) -> CheckedBlock:
    """Validate and type one block. ``columns`` holds every column of
    :meth:`Schema.source_columns` (as read: text or typed); every dtype of ``schema`` must be
    decided (:func:`decide_dtypes`)."""
    names = schema.source_columns()
    columns = {name: _plain(columns[name]) for name in names}
    checked: dict[str, _Checked] = {}
    for spec in schema.labels:
        checked[spec.name] = _label(columns[spec.name], spec, schema.missing)
    if schema.weight is not None:
        checked[schema.weight] = _weight(columns[schema.weight], schema.missing)
    checked.update(_features(columns, schema))
    return _assemble(checked, names, arrow_schema(schema), max_reasons)


def check_features(columns: Mapping[str, pa.Array], schema: Schema, *,
                   max_reasons: int = 20) -> CheckedBlock:
    """:func:`check_block` for rows to score, which carry no label and no weight: ``columns``
    holds every feature column of ``schema``, the table holds those columns alone (as
    :func:`~elasticps.data.chunk_decode.decode_features` reads them), by the same rules."""
    names = tuple(column.name for column in schema.columns)
    checked = _features({name: _plain(columns[name]) for name in names}, schema)
    stored = arrow_schema(schema)
    return _assemble(checked, names, pa.schema([stored.field(name) for name in names]),
                     max_reasons)


def _features(columns: Mapping[str, pa.Array], schema: Schema) -> dict[str, _Checked]:
    checked = {}
    for column in schema.columns:
        id_space = schema.tables[column.table].id_space if column.is_categorical else 0
        checked[column.name] = _feature(columns[column.name], column,
                                        schema.missing_tokens(column), id_space)
    return checked


def _assemble(checked: Mapping[str, _Checked], names: Sequence[str], stored: pa.Schema,
              max_reasons: int) -> CheckedBlock:
    """The good rows of ``checked`` as a table of ``stored``, and the bad rows' reasons (each
    row's first bad column in ``names`` order)."""
    n = len(checked[names[0]].bad) if names else 0
    bad = np.zeros(n, dtype=bool)
    for item in checked.values():
        bad |= item.bad
    bad_rows = np.flatnonzero(bad)
    reasons = []
    for row in bad_rows[:max_reasons]:
        name = next(name for name in names if checked[name].bad[row])
        reasons.append((int(row), name, checked[name].describe(int(row))))
    table = pa.Table.from_arrays([checked[name].array for name in names], schema=stored)
    if bad_rows.size:
        table = table.filter(pa.array(~bad))
    return CheckedBlock(table, bad_rows, reasons)


def _plain(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array with dictionaries decoded (a DataFrame's categoricals)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _arrow(values: np.ndarray | pa.Array, missing: np.ndarray, kind: pa.DataType) -> pa.Array:
    """Values as the stored type, null where ``missing``."""
    if isinstance(values, pa.Array):
        if missing.any():
            values = pc.if_else(pa.array(missing), pa.scalar(None, values.type), values)
        return values.cast(kind)
    return pa.array(values, kind, mask=missing if missing.any() else None)


def _required(values: pv.Values, what: str) -> tuple[np.ndarray, pv.Describe]:
    """Bad rows of a column that may not be missing, and their reasons."""
    bad = values.bad | values.missing

    def describe(row: int) -> str:
        return f"{what} is missing" if values.missing[row] else values.describe(row)

    return bad, describe


def _label(array: pa.Array, spec: LabelSpec, tokens: tuple[str, ...]) -> _Checked:
    kind = label_type(spec)
    if spec.kind == "multi_label":
        classes = int(spec.classes or 0)
        values = pv.lists(array, spec.sep, tokens, _classes(classes), pa.int32())
        listed = values.values
        assert isinstance(listed, pa.ListArray)
        # Without the null mask a missing set is the empty set: a row with none of the classes.
        stored = pa.ListArray.from_arrays(listed.offsets, listed.values)
        return _Checked(stored.cast(kind), values.bad, values.describe)
    if spec.kind == "float":
        values = pv.numbers(array, tokens)
        bad, describe = _required(values, "the label")
        return _Checked(_arrow(np.where(bad, 0, values.values), bad, kind), bad, describe)
    if spec.by_value:
        return _class_value(array, spec, tokens)
    values = lv.binary(array, tokens) if spec.kind == "binary" else pv.integers(array, tokens)
    bad, describe = _required(values, "the label")
    x = values.values
    assert isinstance(x, np.ndarray)
    if spec.kind == "binary":
        wrong = ~bad & (x != 0) & (x != 1)
        wanted = "0 or 1"
    else:
        wrong = ~bad & ((x < 0) | (x >= int(spec.classes or 0)))
        wanted = (f"a class in [0, {spec.classes}) (drop 'classes' to take the values as the "
                  "classes)")

    def why(row: int) -> str:
        return f"the label is {x[row]}, expected {wanted}" if wrong[row] else describe(row)

    bad = bad | wrong
    return _Checked(_arrow(np.where(bad, 0, x), bad, kind), bad, why)


def _class_value(array: pa.Array, spec: LabelSpec, tokens: tuple[str, ...]) -> _Checked:
    """A class label by value: its text, and a value outside the listed classes is bad."""
    values = lv.class_text(array, tokens)
    bad, describe = _required(values, "the label")
    stored = values.values
    assert isinstance(stored, pa.Array)
    if spec.values is not None:
        _, unknown = lv.class_indices(stored, spec.values)
        unseen = ~bad & unknown
        bad = bad | unseen
        shown = ", ".join(repr(v) for v in spec.values[:10]) + (
            ", ..." if len(spec.values) > 10 else "")

        def why(row: int) -> str:
            if unseen[row]:
                return (f"the label {stored[row].as_py()!r} is not one of the classes "
                        f"[{shown}]")
            return describe(row)

        describe = why
    return _Checked(_nulled_to_empty(stored, bad), bad, describe)


def _nulled_to_empty(array: pa.Array, bad: np.ndarray) -> pa.Array:
    """A never-null string column: bad rows (filtered out later) hold empty text."""
    return pc.if_else(pa.array(bad), pa.scalar("", pa.string()), pc.fill_null(array, ""))


def _classes(classes: int) -> pv.ElementParser:
    """Elements of a multi-label set: class indices in [0, classes)."""

    def parse(array: pa.Array, tokens: Sequence[str]) -> pv.Values:
        values = pv.integers(array, tokens)
        x = values.values
        assert isinstance(x, np.ndarray)
        outside = ~values.missing & ~values.bad & ((x < 0) | (x >= classes))

        def describe(row: int) -> str:
            if outside[row]:
                return f"class {x[row]} is outside [0, {classes})"
            return values.describe(row)

        return pv.Values(x, values.missing, values.bad | outside, describe)

    return parse


def _weight(array: pa.Array, tokens: tuple[str, ...]) -> _Checked:
    values = pv.numbers(array, tokens)
    bad, describe = _required(values, "the weight")
    x = values.values
    assert isinstance(x, np.ndarray)
    negative = ~bad & (x < 0)
    bad = bad | negative

    def why(row: int) -> str:
        return f"the weight {x[row]!r} is negative" if negative[row] else describe(row)

    return _Checked(_arrow(np.where(bad, 0, x), bad, WEIGHT_TYPE), bad, why)


def _feature(array: pa.Array, spec: ColumnSpec, tokens: tuple[str, ...],
             id_space: int) -> _Checked:
    kind = column_type(spec)
    if spec.kind == "dense_vector":
        vectors = pv.vectors(array, tokens, int(spec.length or 0))
        return _Checked(vectors.values, vectors.bad, vectors.describe)
    if spec.kind == "multi_categorical":
        element = _element_parser(spec, id_space)
        values = pv.lists(array, spec.sep, tokens, element, kind.value_type)
        assert isinstance(values.values, pa.Array)
        return _Checked(values.values.cast(kind), values.bad, values.describe)
    values = _element_parser(spec, id_space)(array, tokens)
    if spec.kind == "categorical" and spec.ids == "passthrough":
        bad, describe = _required(values, "the id")
        return _Checked(_arrow(values.values, bad, kind), bad, describe)
    return _Checked(_arrow(values.values, values.missing | values.bad, kind), values.bad,
                    values.describe)


def _element_parser(spec: ColumnSpec, id_space: int) -> pv.ElementParser:
    assert spec.dtype is not None  # decided (decide_dtypes)
    parse = pv.BY_DTYPE[spec.dtype]
    if spec.ids != "passthrough" or spec.kind == "dense":
        return parse

    def passthrough(array: pa.Array, tokens: Sequence[str]) -> pv.Values:
        values = parse(array, tokens)
        x = values.values
        assert isinstance(x, np.ndarray)
        outside = ~values.missing & ~values.bad & ((x < 0) | (x >= id_space))

        def describe(row: int) -> str:
            if outside[row]:
                return f"id {x[row]} is outside its table's [0, {id_space})"
            return values.describe(row)

        return pv.Values(x, values.missing, values.bad | outside, describe)

    return passthrough


def decide_dtypes(schema: Schema, columns: Mapping[str, pa.Array]) -> Schema:
    """``schema`` with every undecided dtype decided from a first block of ``columns`` (empty
    when the input has no rows): dense -> float; categorical -> int when every present value is
    an integer (or a passthrough id), else string. Declared dtypes stay."""
    for column in schema.columns:
        if column.dtype is not None:
            continue
        if column.kind == "dense":
            dtype = "float"
        elif column.ids == "passthrough":
            dtype = "int"
        elif column.name not in columns:
            dtype = "string"  # no rows at all: nothing to go by, text stays text
        else:
            dtype = _looks_integral(_plain(columns[column.name]), column, schema)
        schema = schema.replace_column(_with_dtype(column, dtype))
    return schema


def _looks_integral(array: pa.Array, column: ColumnSpec, schema: Schema) -> str:
    tokens = schema.missing_tokens(column)
    if column.kind == "multi_categorical":
        values = pv.lists(array, column.sep, tokens, pv.integers, pa.int64())
        present = ~values.missing
    else:
        values = pv.integers(array, tokens)
        present = ~values.missing
    if not present.any() and pv.is_text(array):
        return "string"  # nothing to go by: text stays text
    return "string" if values.bad.any() else "int"


def _with_dtype(column: ColumnSpec, dtype: str) -> ColumnSpec:
    return dataclasses.replace(column, dtype=dtype)
