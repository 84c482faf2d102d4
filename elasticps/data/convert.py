"""Inputs with a declared schema -> a format-2 dataset, in one streaming pass.

``convert(sources, schema, out_url)`` is what ``elasticps data convert csv|tsv|parquet|jsonl``
and :func:`elasticps.data.write_dataset` run. Per block of input rows (memory is one block plus
one chunk, whatever the input size):

1. the reader splits the rows (:mod:`~elasticps.data.sources`), reporting rows it cannot split;
2. the first block decides every dtype the schema leaves open (:func:`rows.decide_dtypes`);
3. :func:`rows.check_block` types and validates every value; bad rows are skipped, counted and
   reported as ``file:line:column: reason`` (:mod:`~elasticps.data.bad_rows`); past
   ``max_bad_rows`` the run fails and nothing is left in the output;
4. the good rows' dense values update the running statistics (:mod:`~elasticps.data.dense_stats`)
   of the columns whose statistics the schema leaves open, and the rows go to the writer.

The manifest, written last, carries the schema with every dtype decided, the statistics
measured and the classes of a class label by value found (the values seen, sorted); statistics
the schema declares are kept (a preset's fixed range, such as the Criteo preset's ``minmax``
clip range), and with ``like`` every dense column takes another dataset's statistics, the
columns its order and a class label its classes: convert a test split ``like`` its training
set so that both are hashed, normalised, ordered and labelled alike.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elasticps.data import label_values as lv
from elasticps.data.bad_rows import BadRow, BadRows
from elasticps.data.dense_stats import RunningStats
from elasticps.data.manifest import Manifest, read_manifest
from elasticps.data.progress import Progress
from elasticps.data.rows import check_block, decide_dtypes
from elasticps.data.schema import LabelSpec, Schema
from elasticps.data.sources import Source, SourceBlock
from elasticps.data.storage import arrow_schema
from elasticps.data.write_defaults import DEFAULT_MIN_CHUNKS
from elasticps.data.writer import (
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
    DatasetWriter,
)
from elasticps.errors import ConfigError, DataError

log = logging.getLogger(__name__)


@dataclass
class ConvertReport:
    """What a conversion did; ``bad_lines`` holds the first malformed rows, as
    ``file:line:column: reason``."""

    rows: int = 0
    bad_rows: int = 0
    blank_lines: int = 0
    bad_lines: list[str] = field(default_factory=list)
    manifest: Manifest | None = None


@dataclass(frozen=True)
class WriteOptions:
    rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK
    chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE
    compression: str = DEFAULT_COMPRESSION
    overwrite: bool = False
    min_chunks: int = DEFAULT_MIN_CHUNKS  # a dataset of one chunk is split into this many


def like_schema(schema: Schema, like_url: str) -> Schema:
    """``schema`` with the dtypes and dense statistics of the dataset at ``like_url`` for the
    columns both declare alike, its columns in that dataset's order (so both read their dense
    inputs in one order), and its class values for a class label left open."""
    other = read_manifest(like_url).schema
    known = {column.name: column for column in other.columns}
    for column in schema.columns:
        twin = known.get(column.name)
        if twin is None or twin.kind != column.kind:
            raise DataError(f"--like {like_url}: that dataset has no {column.kind} column "
                            f"{column.name!r}")
        if twin.length != column.length:
            raise DataError(f"--like {like_url}: column {column.name!r} holds vectors of length "
                            f"{twin.length} there, {column.length} here")
        schema = schema.replace_column(dataclasses.replace(
            column, dtype=column.dtype or twin.dtype,
            stats=twin.stats if column.kind == "dense" else column.stats))
    order = {name: i for i, name in enumerate(known)}
    columns = tuple(sorted(schema.columns, key=lambda c: order[c.name]))
    return dataclasses.replace(schema, columns=columns, labels=_like_labels(schema, other,
                                                                            like_url))


def _like_labels(schema: Schema, other: Schema, like_url: str) -> tuple[LabelSpec, ...]:
    """The labels, a class label by value taking the other dataset's classes unless it lists
    its own."""
    twins = {label.name: label for label in other.labels}
    labels = []
    for label in schema.labels:
        twin = twins.get(label.name)
        if label.by_value and label.values is None:
            if twin is None or not twin.by_value or twin.values is None:
                raise DataError(f"--like {like_url}: that dataset has no class label "
                                f"{label.name!r} with class values to take")
            label = dataclasses.replace(label, values=twin.values)
        labels.append(label)
    return tuple(labels)


def check_columns(source: Source, schema: Schema, ignore_extra: bool) -> None:
    """A schema column missing from the input, or (unless ``ignore_extra``) an input column
    not in the schema, is an error naming them. Columns declared ``ignore`` may be there or
    not."""
    have = source.column_names()
    wanted = schema.source_columns()
    missing = [name for name in wanted if name not in have]
    if missing:
        raise DataError(f"{source.name}: the schema's column(s) {missing} are not in the input "
                        f"(it has {list(have)})")
    extra = [name for name in have if name not in wanted and name not in schema.ignored]
    if extra and not ignore_extra:
        raise DataError(f"{source.name}: column(s) {extra} are not in the schema; declare them "
                        "or pass --ignore-extra")


def _check_convertible(schema: Schema) -> None:
    for column in schema.categorical_columns:
        if column.dtype == "float":
            raise ConfigError(f"column {column.name!r}: categorical values are integers or "
                              "strings, not dtype float")


class _Run:
    """One conversion: the schema as decided so far, the writer, the counts."""

    def __init__(self, schema: Schema, out_url: str, options: WriteOptions,
                 bad: BadRows) -> None:
        self.schema = schema
        self.out_url = out_url
        self.options = options
        self.bad = bad
        self.writer: DatasetWriter | None = None
        # Only the dense columns whose statistics the schema leaves open are measured.
        self.stats = {column.name: RunningStats() for column in schema.dense_columns
                      if column.stats is None}
        # Class labels by value without listed classes: the values seen become the classes.
        self.classes_seen: dict[str, set[str]] = {label.name: set() for label in schema.labels
                                                  if label.by_value and label.values is None}
        self.rows = 0

    def open_writer(self, first: SourceBlock | None) -> DatasetWriter:
        if first is not None:
            self.schema = decide_dtypes(self.schema, first.columns)
        else:  # no rows at all: text stays text
            self.schema = decide_dtypes(self.schema, {})
        self.writer = DatasetWriter(
            self.out_url, arrow_schema(self.schema), schema=self.schema,
            rows_per_chunk=self.options.rows_per_chunk,
            chunks_per_file=self.options.chunks_per_file,
            compression=self.options.compression, overwrite=self.options.overwrite,
            min_chunks=self.options.min_chunks)
        return self.writer

    def take(self, source: Source, block: SourceBlock) -> None:
        assert self.writer is not None
        self.bad.blank += block.blank
        self.bad.check()
        checked = check_block(block.columns, self.schema)
        unreported = len(checked.bad_rows) - len(checked.reasons)
        for row, column, reason in checked.reasons:
            self.bad.add(BadRow(source.name, int(block.lines[row]), column, reason),
                         also=unreported)
            unreported = 0
        self.bad.check()
        for name, running in self.stats.items():
            values = checked.table.column(name).drop_null().to_numpy()
            running.update(np.asarray(values, dtype=np.float64))
        for name, seen in self.classes_seen.items():
            seen.update(checked.table.column(name).unique().to_pylist())
            if len(seen) > lv.MAX_CLASS_VALUES:
                raise DataError(f"label {name!r} holds more than {lv.MAX_CLASS_VALUES:,} "
                                "distinct values: is it a float label (kind: float)?")
        self.writer.write(checked.table)
        self.rows += checked.table.num_rows

    def final_schema(self) -> Schema:
        """The schema as the manifest records it: dtypes decided, salts pinned (so a later
        change of the default salt cannot change this dataset's ids), statistics measured
        where the schema did not declare them, and the classes of a class label by value found."""
        schema = self.schema
        for column in schema.categorical_columns:
            if column.salt is None:
                schema = schema.replace_column(dataclasses.replace(column,
                                                                   salt=column.hash_salt))
        for name, running in self.stats.items():
            column = schema.column(name)
            schema = schema.replace_column(dataclasses.replace(column, stats=running.result()))
        labels = tuple(label if label.name not in self.classes_seen else dataclasses.replace(
            label, values=lv.class_list(self.classes_seen[label.name]))
            for label in schema.labels)
        return dataclasses.replace(schema, labels=labels)


def _blocks(sources: Sequence[Source],
            columns: Sequence[str]) -> Generator[tuple[Source, SourceBlock, int], None, None]:
    """Every source's blocks in order, with the input bytes consumed so far."""
    done = 0
    for source in sources:
        blocks = source.blocks(columns)
        try:
            for block in blocks:
                yield source, block, done + source.bytes_read
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:  # a generator: stop its reader thread now, not at collection
                close()
        done += source.bytes_read


def convert(sources: Sequence[Source], schema: Schema, out_url: str, *,
            options: WriteOptions = WriteOptions(), max_bad_rows: int = 0,
            ignore_extra: bool = False, like: str | None = None,
            source_info: dict[str, Any] | None = None, progress: bool | None = False,
            total_bytes: int | None = None, bad: BadRows | None = None,
            **manifest_fields: Any) -> ConvertReport:
    """Convert ``sources`` (in order) into one dataset at ``out_url``. ``bad`` is the count of
    malformed rows that the sources report to as well (a new one if not given)."""
    if max_bad_rows < 0:
        raise DataError(f"max_bad_rows={max_bad_rows} must be >= 0")
    if like is not None:
        schema = like_schema(schema, like)
    _check_convertible(schema)
    for source in sources:
        check_columns(source, schema, ignore_extra)
    bad = bad if bad is not None else BadRows(max_bad_rows)
    run = _Run(schema, out_url, options, bad)
    bar = Progress("converting", total_bytes=total_bytes, enabled=progress)
    blocks = _blocks(sources, schema.source_columns())
    with closing(blocks):
        first = next(blocks, None)
        writer = run.open_writer(first[1] if first is not None else None)
        with writer:
            if first is not None:
                run.take(first[0], first[1])
            for source, block, bytes_done in blocks:
                run.take(source, block)
                bar.update(run.rows, bytes_done)
            bad.check()
            report = ConvertReport(rows=run.rows, bad_rows=bad.count, blank_lines=bad.blank,
                                   bad_lines=bad.report())
            report.manifest = writer.close(
                schema=run.final_schema(),
                source={**(source_info or {}), "inputs": [s.name for s in sources],
                        "bad_rows": bad.count, "blank_lines": bad.blank,
                        "first_bad_lines": report.bad_lines},
                **manifest_fields)
    bar.finish(run.rows)
    log.info("Converted %d rows from %d input(s) into %s (%d chunks, %d malformed rows "
             "skipped).", report.rows, len(sources), out_url, len(report.manifest.chunks),
             report.bad_rows)
    return report
