"""``--infer``'s label: which column, and its kind guessed from its values.

The column is ``--label COL`` if given; else one named like a label (``label``, ``target``,
``y``, ``click``, ``clicked``...); else the first column whose values are all binary (said so
in the YAML). Its kind, from the sampled values (the schema's default missing tokens apply):

* ``binary``: every value 0/1, a boolean, or one of the words true/false, yes/no, y/n, t/f
  (any case);
* ``float``: numbers, some of them not integers, or integers with more than
  ``MAX_GUESSED_CLASSES`` distinct values (a quantity, such as a price);
* ``class``: text, or integers with at most ``MAX_GUESSED_CLASSES`` distinct values (a
  rating); the classes are the values seen at conversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from elasticps.data import label_values as lv
from elasticps.data import parse_values as pv
from elasticps.data.schema import DEFAULT_MISSING
from elasticps.errors import DataError

LABEL_NAMES = ("label", "labels", "target", "y", "class", "click", "clicked", "is_click",
               "outcome", "response")
MAX_GUESSED_CLASSES = 20
_SHOWN = 10  # class values the YAML comment lists


@dataclass(frozen=True)
class LabelGuess:
    name: str
    kind: str  # binary, float or class
    note: str  # why this column, and what its values are


def choose_label(samples: Mapping[str, pa.Array], requested: str | None = None) -> LabelGuess:
    """The label of a table whose sampled columns are ``samples`` (see the module docstring)."""
    if requested is not None:
        if requested not in samples:
            raise DataError(f"--label {requested!r}: the input has no such column (it has "
                            f"{list(samples)})")
        return _guess(requested, samples[requested], "chosen with --label")
    for name, array in samples.items():
        if name.lower() in LABEL_NAMES:
            return _guess(name, array, "named like a label")
    for name, array in samples.items():
        if not pv.is_list(array) and _binary(array):
            return _guess(name, array, "GUESSED: no column is named like a label; this is the "
                          "first binary one (pass --label COL to choose)")
    raise DataError("no column looks like a label (named label, target, y, click... or holding "
                    "only 0/1, true/false or yes/no); pass --label COL, or write the schema by "
                    "hand: label: NAME")


def _plain(array: pa.Array) -> pa.Array:
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _binary(array: pa.Array) -> bool:
    values = lv.binary(_plain(array), DEFAULT_MISSING)
    x = np.asarray(values.values)[~values.missing]
    return bool(x.size) and not values.bad.any() and bool(np.all((x == 0) | (x == 1)))


def _guess(name: str, array: pa.Array, why: str) -> LabelGuess:
    guess = _kind(name, _plain(array), why)
    missing = pv.numbers(_plain(array), DEFAULT_MISSING).missing if not pv.is_list(
        array) else pv.null_mask(array)
    if missing.any():  # a row without a label cannot be trained on
        note = (f"{guess.note}; {missing.mean():.1%} missing: those rows are malformed "
                "(--max-bad-rows K skips them)")
        return LabelGuess(guess.name, guess.kind, note)
    return guess


def _kind(name: str, array: pa.Array, why: str) -> LabelGuess:
    if pv.is_list(array):
        raise DataError(f"label column {name!r} holds lists: declare it by hand as "
                        "{name, kind: multi_label, classes: N}")
    if _binary(array):
        return LabelGuess(name, "binary", f"{why}; binary values")
    numbers = pv.numbers(array, DEFAULT_MISSING)
    present = ~numbers.missing
    if not present.any():
        raise DataError(f"label column {name!r} holds no value in the sample")
    if not numbers.bad.any():
        x = np.asarray(numbers.values)[present]
        distinct = np.unique(x)
        if np.any(x != np.floor(x)):
            return LabelGuess(name, "float", f"{why}; numbers")
        if distinct.size > MAX_GUESSED_CLASSES:
            return LabelGuess(name, "float", f"{why}; integers, {distinct.size} distinct "
                              f"(more than {MAX_GUESSED_CLASSES}: a quantity)")
    texts = lv.class_text(array, DEFAULT_MISSING)
    assert isinstance(texts.values, pa.Array)
    classes = lv.class_list(v for v in texts.values.to_pylist() if v is not None)
    shown = ", ".join(str(v) for v in classes[:_SHOWN]) + (", ..." if len(classes) > _SHOWN
                                                           else "")
    return LabelGuess(name, "class", f"{why}; {len(classes)} classes in the sample: {shown}")
