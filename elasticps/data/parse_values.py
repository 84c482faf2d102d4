"""Source values -> typed values, a whole column at a time, with a reason for every bad one.

A source column is whatever a reader produced: text (CSV/TSV fields, JSON strings), or typed
Arrow values (Parquet, JSON numbers and lists, a DataFrame). The rules are the same for all:

* text is stripped of surrounding spaces; a missing token (the schema's ``missing``, by
  default ``""``, ``NA``, ``?``) or a null is a missing value;
* an integer is a decimal integer (an optional sign) or a number with an integral value, such
  as ``260.0`` or ``2.6e2`` (dataframe tools write integer columns with missing values so); up
  to 2**53 for the latter, since floats are exact only that far;
* a number is anything Arrow parses as a float64; ``nan`` counts as missing, an infinity is bad;
* a string is the stripped text; integers in a typed source become their decimal text;
* an ``int32`` is an integer in [-2**31, 2**31);
* a ``hex32`` is exactly 8 hexadecimal digits (either case), the 32-bit value they spell (a
  typed source's integers in [0, 2**32) as they are);
* a vector (``dense_vector``) is a list of exactly ``length`` finite numbers: a list column,
  or text such as ``[0.1, 0.2]`` or ``0.1 0.2`` (commas and/or spaces, optional brackets).

Fast path: one Arrow cast of the whole column. Only a column where that cast fails is searched
value by value (with regular expressions, still vectorised) to find and describe the bad ones.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_EXACT_FLOAT_INT = 2**53
_INT_TEXT = r"^[+-]?[0-9]{1,18}$"  # at most 18 digits: always inside int64
_LONG_INT_TEXT = r"^[+-]?[0-9]{19,}$"
_FLOAT_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(?i:inf|infinity|nan)$"

Describe = Callable[[int], str]


@dataclass(frozen=True)
class Values:
    """One column's values: ``values`` (numpy for numbers, Arrow for strings and lists), which
    rows are ``missing``, which are ``bad`` (neither missing nor valid), and why."""

    values: np.ndarray | pa.Array
    missing: np.ndarray
    bad: np.ndarray
    describe: Describe


def is_text(array: pa.Array) -> bool:
    kind = array.type.value_type if pa.types.is_dictionary(array.type) else array.type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def is_list(array: pa.Array) -> bool:
    return bool(pa.types.is_list(array.type) or pa.types.is_large_list(array.type))


def _mask(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array (nulls false) as numpy."""
    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=bool)


def null_mask(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.zeros(len(array), dtype=bool)
    return _mask(array.is_null())


def text(array: pa.Array, tokens: Sequence[str]) -> tuple[pa.Array, np.ndarray]:
    """(stripped text, missing) of a text column."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    stripped = pc.utf8_trim_whitespace(array)
    missing = null_mask(stripped)
    if tokens:
        missing |= _mask(pc.is_in(stripped, value_set=pa.array(list(tokens), stripped.type)))
    return stripped, missing


def _quote(array: pa.Array, row: int) -> str:
    return repr(array[row].as_py())


def _none(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def integers(array: pa.Array, tokens: Sequence[str]) -> Values:
    """int64 values (``describe`` says ``'2.5' is not an integer``)."""
    n = len(array)
    if pa.types.is_null(array.type):  # no value at all (e.g. a column of Nones)
        return Values(np.zeros(n, np.int64), np.ones(n, bool), _none(n), lambda row: "")
    if pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    if pa.types.is_integer(array.type):
        missing = null_mask(array)
        raw = pc.fill_null(array, 0).to_numpy(zero_copy_only=False)
        bad = _none(n)
        if raw.dtype == np.uint64:
            bad = raw > np.uint64(2**63 - 1)
        values = np.where(bad, 0, raw).astype(np.int64)
        return Values(values, missing, bad, lambda row: f"{_quote(array, row)} is too large")
    if pa.types.is_floating(array.type):
        x = pc.fill_null(array.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)
        return _from_floats(x, np.isnan(x), lambda row: f"{x[row]!r} is not an integer")
    if not is_text(array):
        return _wrong_type(array, "an integer")
    quick = _integers_as_written(array, tokens)
    if quick is not None:
        return quick
    stripped, missing = text(array, tokens)
    filled = pc.if_else(pa.array(missing), pa.scalar("0"), stripped)
    try:
        values = pc.cast(filled, pa.int64()).to_numpy(zero_copy_only=False)
        return Values(values, missing, _none(n), lambda row: "")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return _integers_slowly(stripped, filled, missing)


def _integers_as_written(array: pa.Array, tokens: Sequence[str]) -> Values | None:
    """The common case, without stripping: every value a plain integer, empty or null (empty is
    missing), and no missing token one that an integer could equal (such as ``-1``); else None,
    and the caller takes the general path, which gives the same values for such a column."""
    if pa.types.is_dictionary(array.type) or "" not in tokens or not _no_integer_among(
            tuple(tokens)):
        return None
    missing = null_mask(array) | (_lengths(array) == 0)
    try:
        values = pc.cast(_nulled(array, missing), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return Values(pc.fill_null(values, 0).to_numpy(zero_copy_only=False), missing,
                  _none(len(array)), lambda row: "")


@functools.lru_cache(maxsize=64)
def _no_integer_among(tokens: tuple[str, ...]) -> bool:
    for token in tokens:
        try:
            pc.cast(pa.array([token]), pa.int64())
            return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return True


def _nulled(array: pa.Array, missing: np.ndarray) -> pa.Array:
    """``array`` with a null where ``missing`` (which covers its own nulls)."""
    if not missing.any():
        return array
    if array.offset or array.buffers()[2] is None:
        return pc.if_else(pa.array(missing), pa.scalar(None, array.type), array)
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(array.type, len(array), [validity, *array.buffers()[1:]],
                                 null_count=int(missing.sum()))


def _integers_slowly(stripped: pa.Array, filled: pa.Array, missing: np.ndarray) -> Values:
    """Integers from text where the fast cast failed: find which values are bad."""
    n = len(filled)
    values = np.zeros(n, dtype=np.int64)
    ok = missing.copy()
    int_text = _mask(pc.match_substring_regex(filled, _INT_TEXT))
    if int_text.any():
        unsigned = pc.replace_substring_regex(filled, r"^\+", "")
        as_int = pc.cast(pc.if_else(pa.array(int_text), unsigned, pa.scalar(None, pa.string())),
                         pa.int64())
        values[int_text] = pc.fill_null(as_int, 0).to_numpy(zero_copy_only=False)[int_text]
        ok |= int_text
    for row in np.flatnonzero(_mask(pc.match_substring_regex(filled, _LONG_INT_TEXT)) & ~ok):
        number = int(filled[int(row)].as_py())  # 19+ digits: rare; Python checks the range
        if -(2**63) <= number < 2**63:
            values[row] = number
            ok[row] = True
    float_text = _mask(pc.match_substring_regex(filled, _FLOAT_TEXT)) & ~ok
    if float_text.any():
        as_float = pc.cast(pc.if_else(pa.array(float_text), filled,
                                      pa.scalar(None, pa.string())), pa.float64())
        x = pc.fill_null(as_float, np.nan).to_numpy(zero_copy_only=False)
        integral = float_text & np.isfinite(x) & (np.abs(x) <= MAX_EXACT_FLOAT_INT)
        integral[integral] = x[integral] == np.floor(x[integral])
        values[integral] = x[integral].astype(np.int64)
        ok |= integral
    return Values(values, missing, ~ok,
                  lambda row: f"{_quote(stripped, row)} is not an integer")


def int32_values(array: pa.Array, tokens: Sequence[str]) -> Values:
    """int32 values: integers, and outside [-2**31, 2**31) bad."""
    return _within(integers(array, tokens), -(1 << 31), 1 << 31, np.int32,
                   "outside the int32 range")


# ASCII byte -> its hex digit's value; 255 for a byte that is not a hex digit.
_HEX_DIGIT = np.full(256, 255, dtype=np.uint8)
_HEX_DIGIT[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX_DIGIT[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX_DIGIT[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def hex32_values(array: pa.Array, tokens: Sequence[str]) -> Values:
    """uint32 values of 8-hex-digit text, by a lookup table over the value bytes (no Python per
    value); a typed source's integers in [0, 2**32) as they are."""
    if not is_text(array):
        return _within(integers(array, tokens), 0, 1 << 32, np.uint32, "outside [0, 2**32)")
    quick = _hex32_as_written(array, tokens)
    if quick is not None:
        return quick
    stripped, missing = text(array, tokens)
    values, bad = _hex32(stripped, missing)
    return Values(values, missing, bad,
                  lambda row: f"{_quote(stripped, row)} is not 8 hex digits")


def _hex32_as_written(array: pa.Array, tokens: Sequence[str]) -> Values | None:
    """The common case, without stripping: every value 8 hex digits, empty (missing) or null,
    and no missing token of 8 characters (one that a value could equal); else None, and the
    caller takes the general path, which gives the same values for such a column."""
    if pa.types.is_dictionary(array.type) or "" not in tokens or any(
            len(token) == 8 for token in tokens):
        return None
    missing = null_mask(array) | (_lengths(array) == 0)
    values, bad = _hex32(array, missing)
    return None if bad.any() else Values(values, missing, bad, lambda row: "")


def _hex32(array: pa.Array, missing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 values, bad) of a string array whose values but the ``missing`` ones must be
    exactly 8 hex digits."""
    offsets, data = _string_parts(array)
    lengths = np.diff(offsets)
    eight = lengths == 8
    if (eight | (lengths == 0)).all():  # the common case: the values lie back to back
        chars = data[offsets[0]:offsets[-1]].reshape(-1, 8)
    else:
        chars = data[offsets[:-1][eight][:, None] + np.arange(8)]
    nibbles = np.take(_HEX_DIGIT, chars)
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]
    values = np.zeros(len(array), dtype=np.uint32)
    values[eight] = np.ascontiguousarray(packed).view(">u4").ravel()
    ok = eight.copy()
    if nibbles.size and nibbles.max() == 255:  # one cheap check; per value only if it fails
        ok[np.flatnonzero(eight)[(nibbles == 255).any(axis=1)]] = False
    ok |= missing
    if missing.any() or not ok.all():
        values[missing | ~ok] = 0
    return values, ~ok


def _lengths(array: pa.Array) -> np.ndarray:
    """Byte length of each value of a string array (a null's is whatever its offsets say)."""
    return np.diff(_string_parts(array)[0])


def _string_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64 [n + 1], data bytes) of a string array, honouring its slice offset."""
    width = 8 if pa.types.is_large_string(array.type) else 4
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if width == 8 else np.int32,
                            count=len(array) + 1, offset=array.offset * width)
    data = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None
            else np.zeros(0, np.uint8))
    return offsets.astype(np.int64), data


def _within(values: Values, low: int, high: int, dtype: type[np.integer],
            outside_what: str) -> Values:
    """``values`` as ``dtype``, those outside [low, high) bad (said: ``N is outside_what``)."""
    x = values.values
    assert isinstance(x, np.ndarray)
    outside = ~values.missing & ~values.bad & ((x < low) | (x >= high))
    bad = values.bad | outside

    def describe(row: int) -> str:
        return f"{x[row]} is {outside_what}" if outside[row] else values.describe(row)

    return Values(np.where(bad | values.missing, 0, x).astype(dtype), values.missing, bad,
                  describe)


def _from_floats(x: np.ndarray, missing: np.ndarray, describe: Describe) -> Values:
    present = ~missing
    ok = present & np.isfinite(x) & (np.abs(x) <= MAX_EXACT_FLOAT_INT)
    ok[ok] = x[ok] == np.floor(x[ok])
    values = np.where(ok, x, 0).astype(np.int64)
    return Values(values, missing, present & ~ok, describe)


def numbers(array: pa.Array, tokens: Sequence[str]) -> Values:
    """float64 values; NaN is missing, an infinity is bad."""
    n = len(array)
    if pa.types.is_null(array.type):
        return Values(np.full(n, np.nan), np.ones(n, bool), _none(n), lambda row: "")
    if pa.types.is_boolean(array.type):
        array = array.cast(pa.int8())
    if pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
        x = pc.fill_null(array.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)
        missing = np.isnan(x)
        return Values(x, missing, np.isinf(x), lambda row: f"{x[row]!r} is not a finite number")
    if not is_text(array):
        return _wrong_type(array, "a number")
    stripped, missing = text(array, tokens)
    filled = pc.if_else(pa.array(missing), pa.scalar("nan"), stripped)
    try:
        x = pc.cast(filled, pa.float64()).to_numpy(zero_copy_only=False)
        parsed = ~missing
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        parsed = _mask(pc.match_substring_regex(filled, _FLOAT_TEXT)) & ~missing
        as_float = pc.cast(pc.if_else(pa.array(parsed), filled, pa.scalar(None, pa.string())),
                           pa.float64())
        x = pc.fill_null(as_float, np.nan).to_numpy(zero_copy_only=False)
    x = np.where(missing, np.nan, x)
    missing = missing | (parsed & np.isnan(x))  # "nan" is missing too
    bad = ~missing & ~(parsed & np.isfinite(x))

    def describe(row: int) -> str:
        what = "a finite number" if parsed[row] else "a number"
        return f"{_quote(stripped, row)} is not {what}"

    return Values(x, missing, bad, describe)


def strings(array: pa.Array, tokens: Sequence[str]) -> Values:
    """string values (Arrow); integers of a typed source become their decimal text."""
    if pa.types.is_null(array.type):
        n = len(array)
        return Values(pa.nulls(n, pa.string()), np.ones(n, bool), _none(n), lambda row: "")
    if is_text(array):
        stripped, missing = text(array, tokens)
        return Values(stripped.cast(pa.string()), missing, _none(len(array)), lambda row: "")
    if pa.types.is_integer(array.type) or pa.types.is_boolean(array.type) or (
            pa.types.is_floating(array.type)):
        ints = integers(array, tokens)
        as_text = pa.array(ints.values).cast(pa.string())
        return Values(as_text, ints.missing, ints.bad,
                      lambda row: ints.describe(row).replace("an integer", "an integer or a "
                                                             "string"))
    return _wrong_type(array, "a string")


def _wrong_type(array: pa.Array, wanted: str) -> Values:
    missing = null_mask(array)
    return Values(np.zeros(len(array), np.int64), missing, ~missing,
                  lambda row: f"{_quote(array, row)} ({array.type}) is not {wanted}")


ElementParser = Callable[[pa.Array, Sequence[str]], Values]


def lists(array: pa.Array, sep: str | None, tokens: Sequence[str], element: ElementParser,
          element_type: pa.DataType) -> Values:
    """list values (Arrow ``list<element_type>``) from a list column or text split on ``sep``.

    A missing value is a null list; missing elements (empty text between separators, missing
    tokens, nulls) are dropped; a row with a bad element is bad.
    """
    n = len(array)
    if pa.types.is_null(array.type):
        return Values(pa.nulls(n, pa.list_(element_type)), np.ones(n, bool), _none(n),
                      lambda row: "")
    if is_list(array):
        missing = null_mask(array)
        source_text = None
        parts = array
    elif is_text(array):
        if sep is None:
            missing = null_mask(array)
            return Values(pa.nulls(n, pa.list_(element_type)), missing, ~missing,
                          lambda row: "a multi-valued text column needs its 'sep' declared")
        stripped, missing = text(array, tokens)
        source_text = stripped
        parts = pc.split_pattern(pc.if_else(pa.array(missing), pa.scalar(None, pa.string()),
                                            stripped), sep)
    else:
        return _wrong_type(array, "a list")
    flat = pc.list_flatten(parts)
    parents = pc.list_parent_indices(parts).to_numpy(zero_copy_only=False)
    parsed = element(flat, tokens)
    keep = ~parsed.missing & ~parsed.bad
    bad = np.bincount(parents[parsed.bad], minlength=n) > 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents[keep], minlength=n), out=offsets[1:])
    kept = (parsed.values.filter(pa.array(keep)) if isinstance(parsed.values, pa.Array)
            else pa.array(parsed.values[keep], element_type))
    stored = pa.ListArray.from_arrays(pa.array(offsets), kept.cast(element_type),
                                      mask=pa.array(missing | bad))
    first_bad = np.full(n, -1, dtype=np.int64)
    bad_elements = np.flatnonzero(parsed.bad)
    first_bad[parents[bad_elements][::-1]] = bad_elements[::-1]

    def describe(row: int) -> str:
        whole = _quote(source_text, row) if source_text is not None else _quote(array, row)
        return f"in {whole}: {parsed.describe(int(first_bad[row]))}"

    return Values(stored, missing, bad, describe)


_VECTOR_SEP = r"\s*,\s*|\s+"  # numbers of a vector in text: commas and/or spaces
_BRACKETS = r"^\[\s*|\s*\]$"


def vector_text_parts(stripped: pa.Array) -> pa.Array:
    """The number texts of each vector written as text (``[0.1, 0.2]``, ``0.1 0.2``): a list
    per row, empty for ``[]``, null for null."""
    inner = pc.replace_substring_regex(stripped, _BRACKETS, "")
    # Splitting an empty inside would give one empty value; "[]" holds none.
    blank = pc.fill_null(pc.equal(inner, ""), False)
    parts = pc.split_pattern_regex(pc.if_else(blank, pa.scalar(None, pa.string()), inner),
                                   _VECTOR_SEP)
    return pc.if_else(blank, pa.scalar([], parts.type), parts)


def vectors(array: pa.Array, tokens: Sequence[str], length: int) -> Values:
    """``fixed_size_list<float32>[length]`` values from a list column or text (``[0.1, 0.2]``,
    ``0.1 0.2``: numbers separated by commas and/or spaces, in optional brackets).

    A missing value (null, a missing token) is a null vector; a row with another number of
    values, or with a value that is missing or not a finite number, is bad.
    """
    n = len(array)
    kind = pa.list_(pa.float32(), length)
    if pa.types.is_null(array.type):
        return Values(pa.nulls(n, kind), np.ones(n, bool), _none(n), lambda row: "")
    if is_list(array) or pa.types.is_fixed_size_list(array.type):
        missing, source_text, parts = null_mask(array), None, array
    elif is_text(array):
        stripped, missing = text(array, tokens)
        source_text = stripped
        parts = vector_text_parts(pc.if_else(pa.array(missing), pa.scalar(None, pa.string()),
                                             stripped))
    else:
        return _wrong_type(array, "a list of numbers")
    flat = pc.list_flatten(parts)
    parents = pc.list_parent_indices(parts).to_numpy(zero_copy_only=False)
    parsed = numbers(flat, tokens)
    counts = np.bincount(parents, minlength=n)
    wrong_length = ~missing & (counts != length)
    element_bad = np.bincount(parents[parsed.bad | parsed.missing], minlength=n) > 0
    bad = wrong_length | (~missing & element_bad)
    good = ~missing & ~bad
    values = np.zeros((n, length), dtype=np.float32)
    if good.any():
        x = np.asarray(parsed.values, dtype=np.float64)
        values[good] = x[good[parents]].reshape(-1, length)
    stored = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), length,
                                               mask=pa.array(missing | bad))
    first = np.full(n, -1, dtype=np.int64)
    odd = np.flatnonzero(parsed.bad | parsed.missing)
    first[parents[odd][::-1]] = odd[::-1]
    starts = np.concatenate([[0], np.cumsum(counts)])

    def describe(row: int) -> str:
        whole = _quote(source_text if source_text is not None else array, row)
        whole = whole if len(whole) <= 60 else whole[:57] + "..."
        if first[row] < 0:  # every value a number: the count is wrong
            values = "value" if counts[row] == 1 else "values"
            return f"{whole} has {counts[row]} {values}; the vector's length is {length}"
        position = int(first[row] - starts[row])
        if parsed.missing[first[row]]:
            return f"in {whole}: value {position} is missing"
        return f"in {whole}: value {position}: {parsed.describe(int(first[row]))}"

    return Values(stored, missing, bad, describe)


BY_DTYPE: dict[str, ElementParser] = {"int": integers, "int32": int32_values, "float": numbers,
                                      "string": strings, "hex32": hex32_values}
