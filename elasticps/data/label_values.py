"""A label's values as users' tables hold them: binary words, and class values of any kind.

* **binary**: ``0``/``1`` (and integral numbers such as ``1.0``), booleans, and the words
  ``true/false``, ``yes/no``, ``y/n``, ``t/f`` in any case, read as 1/0.
* **class, by value**: a value that reads as an integer is that integer (``2``, ``+2``, ``2.0``
  are the class 2); any other text is itself, stripped. Stored as that text, so the classes
  stay adjustable at read time, as ids and normalisation do. A dataset's classes are the values
  its schema lists (index k = the k-th value listed), or else the values seen at conversion,
  sorted: integers by value, or, when some value is not an integer, every value as text by
  code point. A class's index is its place in that list; the list is kept in the manifest, so
  a model's k-th output maps back to the k-th value.

Whole columns at a time, as :mod:`elasticps.data.parse_values` reads every other column.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data import parse_values as pv

TRUE_WORDS = ("true", "yes", "y", "t")
FALSE_WORDS = ("false", "no", "n", "f")
BINARY_WANTED = "0 or 1 (or true/false, yes/no, y/n, t/f in any case)"
MAX_CLASS_VALUES = 1 << 16  # distinct values a label found at conversion may have
_INTEGER_TEXT = re.compile(r"-?[0-9]+")

ClassValue = int | str


def binary(array: pa.Array, tokens: Sequence[str]) -> pv.Values:
    """int64 values of a binary label: integers as they are (the caller checks 0/1), and the
    binary words as 1/0; anything else is bad."""
    numbers = pv.integers(array, tokens)
    if not numbers.bad.any() or not pv.is_text(array):
        return numbers
    stripped, _ = pv.text(array, tokens)
    lower = pc.utf8_lower(stripped)
    ones = _in(lower, TRUE_WORDS)
    zeros = _in(lower, FALSE_WORDS)
    words = ones | zeros
    values = np.where(ones, 1, np.where(zeros, 0, numbers.values)).astype(np.int64)
    bad = numbers.bad & ~words

    def describe(row: int) -> str:
        return f"the label is {stripped[row].as_py()!r}, expected {BINARY_WANTED}"

    return pv.Values(values, numbers.missing, bad, describe)


def _in(array: pa.Array, words: Sequence[str]) -> np.ndarray:
    found = pc.is_in(array, value_set=pa.array(list(words), array.type))
    return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)


def class_text(array: pa.Array, tokens: Sequence[str]) -> pv.Values:
    """The class value of each row as its text (Arrow strings): an integer's decimal digits,
    else the stripped text. A number that is not an integer is bad unless written as text."""
    if pv.is_text(array):
        stripped, missing = pv.text(array, tokens)
        ints = pv.integers(array, tokens)
        as_int = pa.array(ints.values).cast(pa.string())
        chosen = pc.if_else(pa.array(ints.bad), stripped.cast(pa.string()), as_int)
        return pv.Values(_nulled(chosen, missing), missing, np.zeros(len(array), bool),
                         lambda row: "")
    values = pv.strings(array, tokens)
    assert isinstance(values.values, pa.Array)

    def describe(row: int) -> str:
        return f"{array[row].as_py()!r} is not a class value (an integer or text)"

    return pv.Values(_nulled(values.values, values.missing | values.bad), values.missing,
                     values.bad, describe)


def _nulled(array: pa.Array, missing: np.ndarray) -> pa.Array:
    if not missing.any():
        return array
    return pc.if_else(pa.array(missing), pa.scalar(None, pa.string()), array)


def class_key(value: ClassValue) -> str:
    """The stored text of a class value."""
    return str(value)


def class_list(seen: Iterable[str]) -> tuple[ClassValue, ...]:
    """The classes of a label whose stored texts are ``seen``, in index order: integers by
    value when every one is an integer, else the texts by code point."""
    texts = set(seen)
    if all(_INTEGER_TEXT.fullmatch(text) for text in texts):
        return tuple(sorted(int(text) for text in texts))
    return tuple(sorted(texts))


def class_indices(array: pa.Array, values: Sequence[ClassValue]) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """(int32 class index of each stored text, which rows hold no class of ``values``)."""
    keys = pa.array([class_key(v) for v in values], pa.string())
    found = pc.index_in(array.cast(pa.string()), value_set=keys)
    unknown = pv.null_mask(found)
    return np.asarray(pc.fill_null(found, 0).to_numpy(zero_copy_only=False),
                      dtype=np.int32), unknown
