"""Rows to score, as JSON objects in the dataset's own column names -> a :class:`Batch`.

A scoring server receives raw rows (``{"age": 34, "country": "FR", "genres": ["War"]}``) and
must hand the model exactly what training read for the same values. Nothing here decides how a
value becomes an input: each key's values become one Arrow column as a JSON Lines input's do
(:func:`~elasticps.data.source_jsonl.json_column`), are parsed and checked by the converters'
rules (:func:`~elasticps.data.rows.check_features`) and hashed and normalised by the reader's
(:func:`~elasticps.data.chunk_decode.decode_features`), so a row scores as it would have after
``elasticps data convert jsonl --like TRAIN``.

A key missing from a row is a missing value, as in JSON Lines. A key that is not a feature
column is refused (a misspelt column would otherwise score as missing), except the schema's
labels and weight, which a row taken from a dataset may carry and which are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elasticps.data.batch import Batch
from elasticps.data.chunk_decode import decode_features
from elasticps.data.rows import check_features
from elasticps.data.schema import Schema
from elasticps.data.source_jsonl import json_column
from elasticps.errors import DataError, InvalidArgumentError, shown


def rows_batch(rows: Sequence[Any], schema: Schema) -> Batch:
    """``rows`` (JSON objects by column name) as one batch read with ``schema``; an
    :class:`InvalidArgumentError` naming the first bad row and column otherwise."""
    if not rows:
        raise InvalidArgumentError("rows is empty: give at least one row to score")
    features = [column.name for column in schema.columns]
    ignored = {label.name for label in schema.labels} | (
        set() if schema.weight is None else {schema.weight})
    known = set(features) | ignored
    for index, row in enumerate(rows):
        _check_keys(index, row, features, known)
    columns = {}
    for name in features:
        try:
            columns[name] = json_column(name, [row.get(name) for row in rows])
        except DataError as exc:
            raise InvalidArgumentError(f"column {name!r}: {exc}") from exc
    checked = check_features(columns, schema, max_reasons=1)
    if checked.reasons:
        row, column, reason = checked.reasons[0]
        raise InvalidArgumentError(f"row {row}: column {column!r}: {reason}")
    try:
        return decode_features(checked.table, schema, "the request")
    except DataError as exc:
        raise InvalidArgumentError(str(exc)) from exc


def _check_keys(index: int, row: Any, features: Sequence[str], known: set[str]) -> None:
    if not isinstance(row, Mapping):
        raise InvalidArgumentError(f"row {index} is a {type(row).__name__}, not an object of "
                                   "column: value")
    unknown = [key for key in row if key not in known]
    if unknown:
        raise InvalidArgumentError(
            f"row {index}: column {shown(unknown[0])} is not one the model reads; its columns "
            f"are {', '.join(features)}")
