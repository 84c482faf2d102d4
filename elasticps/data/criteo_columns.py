"""Vectorised parsing of one block of Criteo text (all columns read as strings) into typed rows.

The CSV reader hands us string columns; here they become label int8, I1..I13 int32 and C1..C26
uint32, with no Python loop per row. Rows that do not parse are not fixed up: they are marked bad
with a reason and left out, and the converter reports them with their line numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data.criteo_layout import (
    DENSE_COLUMNS,
    DENSE_TYPE,
    LABEL,
    LABEL_TYPE,
    SPARSE_COLUMNS,
    SPARSE_TYPE,
    arrow_schema,
)
from elasticps.data.parse_values import integers

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# ASCII byte -> nibble value, 255 for anything that is not a hex digit.
_HEX_LUT = np.full(256, 255, dtype=np.uint8)
for _i, _ch in enumerate(b"0123456789abcdef"):
    _HEX_LUT[_ch] = _i
for _i, _ch in enumerate(b"ABCDEF"):
    _HEX_LUT[_ch] = 10 + _i


@dataclass
class ParsedBlock:
    """The good rows of a block as a typed table, and the bad rows' block-local indices."""

    table: pa.Table
    bad_rows: np.ndarray  # int64 indices into the block, ascending
    reasons: list[tuple[str, str]]  # (column, reason) of the first ``max_reasons`` bad rows
    blank_rows: np.ndarray  # indices of empty lines (every field missing); left out, not bad


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (len n+1, int64) and data bytes of a string array, honouring its slice offset."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), data


def parse_hex_column(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8-hex-digit strings -> (uint32 values, missing mask, bad mask). Empty/null = missing."""
    n = len(arr)
    offsets, data = _string_parts(arr)
    lengths = np.diff(offsets)
    present = lengths == 8
    missing = lengths == 0
    bad = ~(present | missing)
    values = np.zeros(n, dtype=np.uint32)
    if not present.any():
        return values, missing, bad
    if not bad.any():
        # Every value is 8 bytes or empty, so the data buffer is the values back to back.
        chars = data[offsets[0] : offsets[-1]].reshape(-1, 8)
    else:
        starts = offsets[:-1][present]
        chars = data[starts[:, None] + np.arange(8)]
    nibbles = np.take(_HEX_LUT, chars)
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    parsed = np.ascontiguousarray(packed).view(">u4").ravel().astype(np.uint32)
    if nibbles.max() == 255:  # one cheap global check; per-row work only for bad blocks
        not_hex = (nibbles == 255).any(axis=1)
        parsed[not_hex] = 0
        bad[np.flatnonzero(present)[not_hex]] = True
    values[present] = parsed
    return values, missing, bad


def parse_int_column(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decimal strings -> (int32 values, missing mask, bad mask). Empty/null = missing.

    Fast path: one Arrow cast of the whole column. Otherwise the tolerant parse every converter
    shares (:func:`elasticps.data.parse_values.integers`: surrounding spaces, a ``+`` sign, and
    integral floats such as ``260.0``, which dataframe tools write), then the int32 range.
    """
    missing = _null_mask(arr)
    try:
        values = pc.fill_null(pc.cast(arr, DENSE_TYPE), 0).to_numpy(zero_copy_only=False)
        return values.astype(np.int32, copy=False), missing, np.zeros(len(arr), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    text = arr.cast(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:  # bytes that are not UTF-8 (the reader does not check): rare
        text = pa.array([None if v is None else v.decode("utf-8", "replace")
                         for v in arr.cast(pa.binary()).to_pylist()], pa.string())
    parsed = integers(text, ("",))
    wide = np.asarray(parsed.values)
    bad = parsed.bad | (~parsed.missing & ((wide < _INT32_MIN) | (wide > _INT32_MAX)))
    values = np.where(bad | parsed.missing, 0, wide).astype(np.int32)
    return values, parsed.missing, bad


def _null_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), dtype=bool)
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def parse_block(batch: pa.RecordBatch, max_reasons: int = 20) -> ParsedBlock:
    """Parse a record batch of string columns named label, I1..I13, C1..C26."""
    n = batch.num_rows
    bad = np.zeros(n, dtype=bool)
    all_missing = np.ones(n, dtype=bool)
    problems: list[tuple[str, np.ndarray, str]] = []  # (column, bad mask, what was expected)

    label, label_missing, label_bad = parse_int_column(batch.column(LABEL))
    label_bad |= ~label_missing & (label != 0) & (label != 1)
    all_missing &= label_missing
    problems.append((LABEL, label_bad, "a label (0 or 1)"))
    columns: dict[str, pa.Array] = {}
    for name in DENSE_COLUMNS:
        values, missing, col_bad = parse_int_column(batch.column(name))
        all_missing &= missing
        problems.append((name, col_bad, "an int32 integer"))  # integral floats pass
        columns[name] = pa.array(values, type=DENSE_TYPE, mask=missing)
    for name in SPARSE_COLUMNS:
        uvalues, missing, col_bad = parse_hex_column(batch.column(name))
        all_missing &= missing
        problems.append((name, col_bad, "8 hex digits"))
        columns[name] = pa.array(uvalues, type=SPARSE_TYPE, mask=missing)
    for _, col_bad, _ in problems:
        bad |= col_bad
    blank = all_missing
    label_absent = label_missing & ~blank
    bad |= label_absent
    bad &= ~blank

    keep = ~(bad | blank)
    table = pa.Table.from_arrays(
        [pa.array(label.astype(np.int8), type=LABEL_TYPE), *columns.values()],
        schema=arrow_schema(),
    )
    if not keep.all():
        table = table.filter(pa.array(keep))
    bad_rows = np.flatnonzero(bad)
    reasons = [
        _reason(batch, int(row), problems, label_absent) for row in bad_rows[:max_reasons]
    ]
    return ParsedBlock(table, bad_rows, reasons, np.flatnonzero(blank))


def _reason(
    batch: pa.RecordBatch,
    row: int,
    problems: list[tuple[str, np.ndarray, str]],
    label_absent: np.ndarray,
) -> tuple[str, str]:
    """(column, reason) of a bad row."""
    if label_absent[row]:
        return LABEL, "the label is empty"
    for name, col_bad, expected in problems:
        if col_bad[row]:
            # As bytes: the reader skips UTF-8 validation, so the text may not be UTF-8.
            raw = pc.cast(batch.column(name).slice(row, 1), pa.binary())[0].as_py()
            text = raw.decode("utf-8", "backslashreplace")
            return name, f"{text!r} is not {expected}"
    return "", "unknown problem"
