"""``--infer``'s rules for the feature columns that are not plain numbers: what to leave out
(``ignore``), lists (``dense_vector`` or ``multi_categorical``) and text (``dense_vector``,
``multi_categorical``, ``text``, ``ignore`` or ``categorical``), each with the reason the YAML
comment gives.

* **Left out** (``ignore``): an index a DataFrame wrote (``__index_level_0__``, ``Unnamed: 0``),
  consecutive integers with no gap (row numbers, ``0..n-1``), and a categorical column unique on
  (nearly) every row of the sample (at least ``UNIQUE_SHARE`` of ``MIN_UNIQUE_VALUES`` or more
  values distinct): row ids name a row, and a model learns nothing from a value it sees once.
* **Lists**: of floats (a Parquet ``list<double>``, a JSON list of numbers), of one length in
  every row -> ``dense_vector`` of that length; of integers or strings -> ``multi_categorical``.
  Text such as ``[0.1, 0.2]`` in every row, of one length -> ``dense_vector`` too.
* **Text**: pieces separated by ``|`` or ``;`` that are short (on average at most
  ``LIST_PIECE_WORDS`` words) -> ``multi_categorical`` with that ``sep``; words separated by
  spaces (in at least ``SPACED_SHARE`` of the values), ``TEXT_WORDS`` or more of them on
  average, or two or more in mostly distinct values -> ``text`` (a bag of words,
  :mod:`~elasticps.data.tokenize`); then unique values -> ``ignore``; else ``categorical``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data import parse_values as pv
from elasticps.data.tokenize import words

INDEX_NAME = re.compile(r"__index_level_\d+__|Unnamed: \d+")
MIN_SEQUENCE_ROWS = 20  # fewer rows than this in a row (0, 1, 2...) prove nothing
MIN_UNIQUE_VALUES = 100
UNIQUE_SHARE = 0.99
SPACED_SHARE = 0.5  # text: words separated by spaces in at least this share of the values
TEXT_WORDS = 3.0
SHORT_TEXT_WORDS, SHORT_TEXT_DISTINCT = 2.0, 0.5
LIST_PIECE_WORDS = 2.0
SEPARATORS = ("|", ";")
_BRACKETED = r"^\[.*\]$"


@dataclass(frozen=True)
class Verdict:
    """A feature column's guessed kind, its options, and why."""

    kind: str
    note: str
    sep: str | None = None
    length: int | None = None


def index_column(name: str) -> Verdict | None:
    if INDEX_NAME.fullmatch(name):
        return Verdict("ignore", "an index a DataFrame wrote, not a feature: left out")
    return None


def row_numbers(values: np.ndarray) -> Verdict | None:
    """``values`` (every row's integer, none missing) counting up by one: row numbers."""
    if values.size < MIN_SEQUENCE_ROWS or not np.array_equal(
            values, values[0] + np.arange(values.size)):
        return None
    return Verdict("ignore", f"row numbers ({values[0]:.0f}, {values[0] + 1:.0f}, ... on every "
                   "row): an index, not a feature: left out")


def unique(distinct: int, present: int, what: str) -> Verdict | None:
    """A column whose present values are (nearly) all distinct: a row id."""
    if present < MIN_UNIQUE_VALUES or distinct < UNIQUE_SHARE * present:
        return None
    return Verdict("ignore", f"{what}, {distinct / present:.1%} distinct: a row id, nothing "
                   "to learn: left out (or categorical, if its values repeat later)")


def list_column(array: pa.Array) -> Verdict:
    element = array.type.value_type
    if not pa.types.is_floating(element):
        what = "integers" if pa.types.is_integer(element) else "values"
        hint = " (declare {kind: dense_vector, length: N} if they measure)" if (
            what == "integers") else ""
        return Verdict("multi_categorical", f"lists of {what}{hint}")
    return _vector(pc.list_value_length(array.drop_null()), "lists of numbers")


def _vector(lengths: pa.Array, what: str) -> Verdict:
    seen = np.unique(np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64))
    if seen.size == 1 and seen[0] > 0:
        return Verdict("dense_vector", f"{what}, {seen[0]} in every row", length=int(seen[0]))
    if seen.size == 0:
        return Verdict("ignore", f"{what}, none in the sample: declare its kind")
    return Verdict("ignore", f"{what} of {seen.size} lengths ({seen.min()} to {seen.max()}): "
                   "declare its kind (a dense_vector has one length)")


def text_column(present: pa.Array, missing_rate: str) -> Verdict:
    """The verdict on a text column from its present values (stripped strings)."""
    vector = _vector_text(present)
    if vector is not None:
        return vector
    values = present.to_pylist()
    for sep in SEPARATORS:
        if any(sep in value for value in values):
            pieces = pc.list_flatten(pc.split_pattern(present, sep))
            if _mean_words(pieces) <= LIST_PIECE_WORDS:
                return Verdict("multi_categorical", f"short values separated by {sep!r}",
                               sep=sep)
    distinct = len(set(values))
    mean_words = _mean_words(present)
    share = distinct / max(len(values), 1)
    spaced = pc.mean(pc.match_substring_regex(present, r"\S\s+\S")).as_py() or 0.0
    if spaced >= SPACED_SHARE and (mean_words >= TEXT_WORDS or (
            mean_words >= SHORT_TEXT_WORDS and share >= SHORT_TEXT_DISTINCT)):
        return Verdict("text", f"free text, {mean_words:.1f} words a value, {share:.0%} "
                       f"distinct, {missing_rate}: a bag of its words")
    return unique(distinct, len(values), "text") or Verdict(
        "categorical", f"text, {distinct} distinct, {missing_rate}")


def _mean_words(texts: pa.Array) -> float:
    if len(texts) == 0:
        return 0.0
    _, rows = words(texts)
    return rows.size / len(texts)


def _vector_text(present: pa.Array) -> Verdict | None:
    """Text such as ``[0.1, 0.2]`` in every present value, every number parsing."""
    if len(present) == 0 or not pc.all(pc.match_substring_regex(present, _BRACKETED)).as_py():
        return None
    parts = pv.vector_text_parts(present)
    numbers = pv.numbers(pc.list_flatten(parts), ())
    if numbers.bad.any() or numbers.missing.any():
        return None
    return _vector(pc.list_value_length(parts), "bracketed lists of numbers")
