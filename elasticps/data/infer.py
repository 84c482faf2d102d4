"""``--infer``: a schema guessed from the first rows of an input, printed as YAML to review.

The guess, per column, from up to ``SAMPLE_ROWS`` rows (the schema's default missing tokens
apply):

* an index a DataFrame wrote (``__index_level_0__``, ``Unnamed: 0``), or integers counting up
  by one on every row (row numbers) -> ``ignore``;
* every present value a number -> ``dense``, except integers in a column named like an id
  (``id``, ``user_id``, ``item-id``, ``userId``) -> ``categorical``: ids name things, they
  do not measure them (and ``ignore`` when nearly every row has its own);
* the label: ``--label COL``, else a column named like a label, else the first binary column,
  its kind (binary, float or class) guessed from its values (:mod:`.infer_label`);
* lists of floats of one length (or text such as ``[0.1, 0.2]``) -> ``dense_vector``; other
  lists -> ``multi_categorical``;
* text: short pieces separated by ``|`` or ``;`` -> ``multi_categorical`` with that ``sep``;
  sentences -> ``text``; a value unique on nearly every row -> ``ignore``; other text ->
  ``categorical``.

The rules for lists, text and what to leave out, with their thresholds, are in
:mod:`~elasticps.data.infer_columns`.

It writes nothing: the point is a file to read and fix, then convert with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from elasticps.data import infer_columns as rules
from elasticps.data import parse_values as pv
from elasticps.data.infer_label import LabelGuess, choose_label
from elasticps.data.schema import DEFAULT_MISSING
from elasticps.data.sources import Source
from elasticps.errors import DataError

SAMPLE_ROWS = 10_000


@dataclass(frozen=True)
class Guess:
    name: str
    kind: str  # a feature kind, ignore, or "empty" (no value seen)
    note: str
    sep: str | None = None
    zero_one: bool = False
    length: int | None = None  # dense_vector


def _verdict(name: str, verdict: rules.Verdict) -> Guess:
    return Guess(name, verdict.kind, verdict.note, sep=verdict.sep, length=verdict.length)


def infer_schema(source: Source, sample_rows: int = SAMPLE_ROWS,
                 label: str | None = None) -> str:
    """The guessed schema of ``source`` as YAML text (with comments); ``label`` names the label
    column (default: guessed)."""
    names = source.column_names()
    if not names:
        raise DataError(f"{source.name}: no columns found to infer a schema from")
    columns: dict[str, list[pa.Array]] = {name: [] for name in names}
    rows = 0
    for block in source.blocks(names):
        for name in names:
            columns[name].append(block.columns[name])
        rows += block.num_rows
        if rows >= sample_rows:
            break
    samples = {name: _sample(parts, sample_rows) for name, parts in columns.items()}
    chosen = choose_label(samples, label)
    guesses = [_guess(name, sample, rows) for name, sample in samples.items()
               if name != chosen.name]
    return _yaml(source.name, min(rows, sample_rows), guesses, chosen)


def _sample(parts: list[pa.Array], rows: int) -> pa.Array:
    if not parts:
        return pa.nulls(0, pa.string())
    types = {part.type for part in parts}
    if len(types) > 1:  # typed blocks that disagree (JSON): compare them as text
        parts = [part.cast(pa.string()) if not pv.is_list(part) else part for part in parts]
    return pa.concat_arrays(parts).slice(0, rows)


def _guess(name: str, array: pa.Array, rows: int) -> Guess:
    tokens = DEFAULT_MISSING
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    index = rules.index_column(name)
    if index is not None:
        return _verdict(name, index)
    if pv.is_list(array):
        return _verdict(name, rules.list_column(array))
    numbers = pv.numbers(array, tokens)
    present = ~numbers.missing
    if not present.any():
        return Guess(name, "empty", "no value in the sample: declare its kind")
    missing_rate = f"{numbers.missing.mean():.1%} missing"
    if not numbers.bad.any():
        x = np.asarray(numbers.values)[present]
        integral = bool(np.all(x == np.floor(x)))
        zero_one = bool(np.all((x == 0) | (x == 1)))
        what = "integers" if integral else "numbers"
        counting = rules.row_numbers(x) if integral and present.all() and not zero_one else None
        if counting is not None:
            return _verdict(name, counting)
        if integral and not zero_one and is_id_name(name):
            distinct = len(np.unique(x))
            return _verdict(name, rules.unique(distinct, x.size, "integers named like an id")
                            or rules.Verdict("categorical", f"integers named like an id, "
                                             f"{distinct} distinct, {missing_rate}"))
        return Guess(name, "dense", f"{what}, {missing_rate}", zero_one=zero_one)
    stripped, text_missing = pv.text(array, tokens) if pv.is_text(array) else (
        array.cast(pa.string()), pv.null_mask(array))
    present_text = stripped.filter(pa.array(~text_missing)).drop_null()
    return _verdict(name, rules.text_column(present_text, missing_rate))


def is_id_name(name: str) -> bool:
    """``id``, ``user_id``, ``item-id``, ``user.id``, ``userId``, ``USER_ID``: named like an id."""
    return name.lower() == "id" or re.search(r"[_\-\s.]id$", name, re.IGNORECASE) is not None \
        or re.search(r"[a-z0-9]Id$", name) is not None


_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _key(name: str) -> str:
    """A column name as a YAML scalar: plain where that reads back as the same string."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) and name.lower() not in _RESERVED:
        return name
    return json.dumps(name)  # a JSON string is a YAML string


def _yaml(where: str, rows: int, guesses: list[Guess], label: LabelGuess) -> str:
    lines = [f"# A schema guessed from the first {rows:,} rows of {where}: review it, then",
             "# elasticps data convert ... --schema THIS_FILE --out DIR",
             f"label: {_key(label.name)}" if label.kind == "binary" else
             f"label: {{name: {_key(label.name)}, kind: {label.kind}}}",
             f"# label: {label.note}",
             "columns:"]
    width = max((len(_key(g.name)) for g in guesses), default=0) + 2
    for guess in guesses:
        key = f"  {_key(guess.name)}:".ljust(width + 3)
        if guess.kind == "multi_categorical" and guess.sep is not None:
            value = f"{{kind: multi_categorical, sep: {json.dumps(guess.sep)}}}"
        elif guess.kind == "dense_vector":
            value = f"{{kind: dense_vector, length: {guess.length}}}"
        elif guess.kind == "empty":
            value = "categorical"
        else:
            value = guess.kind
        lines.append(f"{key} {value.ljust(44)} # {guess.note}")
    return "\n".join(lines) + "\n"
