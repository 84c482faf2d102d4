"""Plain text -> an N-gram dataset for a word model: N-1 context words -> the next word.

``elasticps data convert text FILE... --ngram N --out DIR [--vocab-size V] [--min-count C]
[--test-fraction F] [--seed S] [--keep-case]``

* **Sentences** are lines; blank lines are skipped. Inputs are UTF-8 (bad bytes are replaced)
  and may be compressed.
* **Tokens** are the maximal runs of Unicode letters, digits and apostrophes
  (``[\\p{L}\\p{N}']+``), with apostrophes trimmed from both ends (``'quoted'`` -> ``quoted``,
  ``it's`` stays), lowercased unless ``--keep-case``. Everything else separates tokens.
* **Split**: line ``i`` (0-based, over all inputs in order) goes to the test split when
  ``splitmix64((seed << 40) + i) / 2**64 < F``: a fixed, seeded choice of sentences, written
  to ``DIR/test`` (a dataset of its own, named in ``splits``), never trained on.
* **Vocabulary** from the training sentences only: id 0 is ``<s>`` (the padding before a
  sentence's first word), 1 ``<unk>`` (any other word), 2 ``</s>`` (the end of a sentence,
  predicted like a word), then the words seen at least ``C`` times, most frequent first (ties
  in code-point order), up to ``V`` ids in all. It is written to ``vocab.txt`` (line ``k`` =
  id ``k``) in both splits and named in the manifest's ``files``.
* **Rows**: for every word and the end of every sentence, one row: columns ``w1..w{N-1}``
  (the preceding words, oldest first, ``<s>`` before the start) as ``ids: passthrough`` into
  the table ``words`` (``id_space`` = vocabulary size), and the label ``next`` (``kind:
  class``, ``classes`` = vocabulary size).

Two passes over the inputs (count, then write); memory is the vocabulary's counts plus one
block of lines. Tokenising and row building are vectorised (Arrow's RE2 regex kernels, numpy).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from elasticps.data.manifest import Manifest
from elasticps.data.schema import ColumnSpec, LabelSpec, Schema, TableDecl
from elasticps.data.sources import BLOCK_SIZE
from elasticps.data.storage import arrow_schema
from elasticps.data.writer import DEFAULT_ROWS_PER_CHUNK, DatasetWriter
from elasticps.errors import DataError
from elasticps.hashing import splitmix64

log = logging.getLogger(__name__)

BOS, UNK, EOS = "<s>", "<unk>", "</s>"
SPECIALS = (BOS, UNK, EOS)
TOKEN_SEPARATORS = r"[^\p{L}\p{N}']+"
TABLE = "words"
LABEL = "next"
VOCAB_FILE = "vocab.txt"
TEST_SPLIT = "test"


@dataclass(frozen=True)
class TextOptions:
    ngram: int = 3
    vocab_size: int = 10_000
    min_count: int = 1
    test_fraction: float = 0.1
    seed: int = 0
    keep_case: bool = False
    dim: int = 32

    def __post_init__(self) -> None:
        if self.ngram < 2:
            raise DataError(f"--ngram {self.ngram}: an N-gram model needs N >= 2")
        if self.vocab_size < len(SPECIALS) + 1:
            raise DataError(f"--vocab-size {self.vocab_size} must be >= {len(SPECIALS) + 1}")
        if self.min_count < 1:
            raise DataError(f"--min-count {self.min_count} must be >= 1")
        if not 0.0 <= self.test_fraction < 1.0:
            raise DataError(f"--test-fraction {self.test_fraction} must be in [0, 1)")


@dataclass(frozen=True)
class TextReport:
    manifest: Manifest
    test_manifest: Manifest | None
    vocabulary: tuple[str, ...]


def line_blocks(urls: Sequence[str]) -> Iterator[pa.StringArray]:
    """Lines of the inputs, a block at a time, as Arrow strings (no Python per line)."""
    for url in urls:
        with fsspec.open(url, "rb", compression="infer") as raw:
            rest = b""
            while True:
                data = raw.read(BLOCK_SIZE)
                chunk = rest + data
                if not data:
                    if chunk:
                        yield _lines(chunk + b"\n")
                    break
                cut = chunk.rfind(b"\n") + 1
                if cut:
                    yield _lines(chunk[:cut])
                    rest = chunk[cut:]
                else:
                    rest = chunk


def _lines(data: bytes) -> pa.Array:
    """``data`` (whole lines, each ending in a newline) as one string per line."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)
    offsets = np.zeros(ends.size + 1, dtype=np.int64)
    offsets[1:] = ends + 1
    text = pa.LargeStringArray.from_buffers(ends.size, pa.py_buffer(offsets.tobytes()),
                                            pa.py_buffer(data))
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: decode once with replacement characters
        return _lines(data.decode("utf-8", "replace").encode("utf-8"))
    return pc.utf8_rtrim(text, "\r\n")


def tokenize(lines: pa.Array, keep_case: bool) -> tuple[pa.Array, np.ndarray]:
    """(tokens of all lines, flat; the number of tokens of each line)."""
    text = lines if keep_case else pc.utf8_lower(lines)
    parts = pc.split_pattern_regex(text, TOKEN_SEPARATORS)
    flat = pc.utf8_trim(pc.list_flatten(parts), "'")
    parents = pc.list_parent_indices(parts).to_numpy(zero_copy_only=False)
    keep = np.asarray(pc.greater(pc.utf8_length(flat), 0).to_numpy(zero_copy_only=False),
                      dtype=bool)
    counts = np.bincount(parents[keep], minlength=len(lines)).astype(np.int64)
    return flat.filter(pa.array(keep)), counts


def test_lines(first_line: int, count: int, options: TextOptions) -> np.ndarray:
    """Which of the lines ``first_line ..`` go to the test split (see the module docstring)."""
    index = np.arange(first_line, first_line + count, dtype=np.uint64)
    draw = splitmix64((np.uint64(options.seed) << np.uint64(40)) + index)
    return draw.astype(np.float64) / 2.0**64 < options.test_fraction


def build_vocabulary(urls: Sequence[str], options: TextOptions) -> tuple[str, ...]:
    """Pass 1: the training sentences' words, most frequent first, after the specials."""
    counts: Counter[str] = Counter()
    first = 0
    for lines in line_blocks(urls):
        train = ~test_lines(first, len(lines), options)
        first += len(lines)
        tokens, per_line = tokenize(lines.filter(pa.array(train)), options.keep_case)
        del per_line
        frequencies = pc.value_counts(tokens)
        counts.update(dict(zip(frequencies.field("values").to_pylist(),
                               frequencies.field("counts").to_pylist(), strict=True)))
    ranked = sorted((word for word, n in counts.items()
                     if n >= options.min_count and word not in SPECIALS),
                    key=lambda word: (-counts[word], word))
    return SPECIALS + tuple(ranked[: options.vocab_size - len(SPECIALS)])


def ngram_schema(vocabulary_size: int, options: TextOptions) -> Schema:
    columns = tuple(ColumnSpec(f"w{k}", "categorical", dtype="int", table=TABLE,
                               ids="passthrough") for k in range(1, options.ngram))
    return Schema(labels=(LabelSpec(LABEL, "class", classes=vocabulary_size),),
                  columns=columns,
                  tables={TABLE: TableDecl(TABLE, options.dim, vocabulary_size)})


def ngram_rows(ids: np.ndarray, per_line: np.ndarray, n: int) -> np.ndarray:
    """Rows [contexts..., next] (int64 [R, n]) of sentences whose word ids are ``ids`` (flat)
    with ``per_line`` words each: each sentence padded by n-1 ``<s>`` in front and closed by
    ``</s>``."""
    padded = per_line + n  # n-1 pads, the words, </s>
    starts = np.zeros(per_line.size, dtype=np.int64)
    np.cumsum(padded[:-1], out=starts[1:])
    flat = np.full(int(padded.sum()), SPECIALS.index(BOS), dtype=np.int64)
    word_start = np.repeat(starts + n - 1, per_line)
    within = np.arange(ids.size, dtype=np.int64) - np.repeat(np.cumsum(per_line) - per_line,
                                                             per_line)
    flat[word_start + within] = ids
    flat[starts + n - 1 + per_line] = SPECIALS.index(EOS)
    target = np.ones(flat.size, dtype=bool)
    for pad in range(n - 1):
        target[starts + pad] = False
    positions = np.flatnonzero(target)
    return np.stack([flat[positions - (n - 1) + k] for k in range(n)], axis=1)


def _table(rows: np.ndarray, schema: Schema) -> pa.Table:
    n = rows.shape[1]
    arrays = [pa.array(rows[:, n - 1].astype(np.int32))]
    arrays += [pa.array(rows[:, k]) for k in range(n - 1)]
    return pa.Table.from_arrays(arrays, schema=arrow_schema(schema))


def _remove_split_unless(main: DatasetWriter, split_url: str) -> None:
    if not main.closed:
        main.fs.rm(fsspec.core.url_to_fs(split_url)[1], recursive=True)


def convert_text(urls: Sequence[str], out_url: str, options: TextOptions = TextOptions(), *,
                 rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK, overwrite: bool = False,
                 **writer_options: Any) -> TextReport:
    """Convert text files into an N-gram dataset at ``out_url`` (and ``out_url/test``)."""
    if not urls:
        raise DataError("no input files given")
    vocabulary = build_vocabulary(urls, options)
    schema = ngram_schema(len(vocabulary), options)
    vocab_bytes = ("\n".join(vocabulary) + "\n").encode("utf-8")
    value_set = pa.array(vocabulary, pa.string())
    source = {"kind": "text", "inputs": list(urls), "ngram": options.ngram,
              "vocab_size": options.vocab_size, "min_count": options.min_count,
              "test_fraction": options.test_fraction, "seed": options.seed,
              "keep_case": options.keep_case}
    common = {"schema": schema, "rows_per_chunk": rows_per_chunk, **writer_options}
    test_url = out_url.rstrip("/") + "/" + TEST_SPLIT
    with ExitStack() as stack:
        main = stack.enter_context(DatasetWriter(out_url, arrow_schema(schema),
                                                 overwrite=overwrite, **common))
        test = stack.enter_context(DatasetWriter(test_url, arrow_schema(schema), **common)) \
            if options.test_fraction > 0 else None
        first = 0
        for lines in line_blocks(urls):
            held_out = test_lines(first, len(lines), options)
            first += len(lines)
            tokens, per_line = tokenize(lines, options.keep_case)
            ids = pc.fill_null(pc.index_in(tokens, value_set=value_set),
                               SPECIALS.index(UNK)).to_numpy(zero_copy_only=False)
            token_line = np.repeat(np.arange(len(lines)), per_line)
            for writer, chosen in ((main, ~held_out), (test, held_out)):
                if writer is not None:
                    words = per_line[chosen & (per_line > 0)]
                    rows = ngram_rows(ids[chosen[token_line]].astype(np.int64), words,
                                      options.ngram)
                    writer.write(_table(rows, schema))
        test_manifest = None
        if test is not None:
            test.write_file("vocab", VOCAB_FILE, vocab_bytes)
            test_manifest = test.close(source={**source, "split": TEST_SPLIT})
            # Should the main dataset fail from here on, its split goes with it.
            stack.callback(_remove_split_unless, main, test_url)
        main.write_file("vocab", VOCAB_FILE, vocab_bytes)
        manifest = main.close(source=source,
                              splits={TEST_SPLIT: TEST_SPLIT} if test is not None else {})
    log.info("Wrote %d %d-gram rows (%d test rows) over a vocabulary of %d words to %s.",
             manifest.num_rows, options.ngram,
             test_manifest.num_rows if test_manifest is not None else 0, len(vocabulary), out_url)
    return TextReport(manifest, test_manifest, vocabulary)
