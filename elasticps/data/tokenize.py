"""The tokenizer of ``text`` columns (``tokenizer: words``, the only one), at read time.

A row's words are the maximal runs of Unicode letters, digits and underscores (the RE2 class
``[\\pL\\pN_]``) of its text lower-cased character by character (Arrow's ``utf8_lower``), in
order, repeats kept: ``"Great phone, GREAT price!"`` -> ``great, phone, great, price``. Each word
is then hashed as a string of the column (:mod:`elasticps.data.hashing`, the column's salt)
into its table, so a text column reads as a bag of ids like a ``multi_categorical`` one. A
missing or empty text has no words (an empty bag).

In plain Python, for a scorer outside elasticps: ``re.findall(r"[^\\W]+", "".join(c.lower() for
c in text))``, which agrees with this for every letter whose lower case is one character (the
per-character lower case does not apply the final-sigma rule of ``str.lower``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data.arrow_numpy import bool_numpy, int_numpy

NOT_WORD = r"[^\pL\pN_]+"  # RE2: what separates words


def words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(every row's words in row order, the row of each word: int64) of a string array."""
    parts = pc.split_pattern_regex(pc.utf8_lower(texts), NOT_WORD)
    flat = pc.list_flatten(parts)
    rows = int_numpy(pc.list_parent_indices(parts)).astype(np.int64)
    # A text that starts or ends with a separator splits into an empty first or last piece.
    nonempty = pc.utf8_length(flat).cast(pa.bool_())  # a length is true unless 0 (no scalar
    # argument: converting a Python 0 would load pandas, see arrow_numpy.py)
    keep = bool_numpy(nonempty)
    if keep.all():
        return flat, rows
    return flat.filter(nonempty), rows[keep]
