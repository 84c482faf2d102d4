"""What ``dist_train(reader=...)`` accepts for a table in memory: a pandas DataFrame, a pyarrow
Table or a dict of arrays, with its schema (``elasticps.reader.from_pandas(df, schema)``).

The script runs in every trainer, so every trainer builds the table; the master hands out a
dataset's chunks and needs a manifest it can read, and a pass's batches must be the same
whichever trainer (or restarted trainer) reads them. So inside a job the table becomes a dataset
once: the first trainer to take ``job/tables/<name>/lock`` (under its lease) writes it with
:func:`elasticps.data.write_dataset` (the converters' checks, dtype decisions and statistics)
under ``WORKDIR/datasets/<name>-<fingerprint>`` (or ``url=``), publishes where in
``job/tables/<name>/done`` and every trainer then trains on that dataset as on any other: the
task queue, the batch numbering and exactly-once are the dataset's. A writer that dies lets its
lock go with its lease and the next trainer writes the table instead.

The **fingerprint** (SHA-256 of the table's Arrow data, the schema and how it is chunked) is what
every trainer checks its own table against: a script that builds a different table in another
trainer (an unseeded sample, data that depends on the trainer's index) fails with both
fingerprints named instead of training on one trainer's table without a word. A dataset already
written with the same fingerprint (the same table in the same work directory, a job ago) is read
as it is: the next experiment on an unchanged table pays no conversion.

Without ``schema`` the schema is guessed from the table (``elasticps data convert --infer``'s
rules) and logged, so it can be reviewed and passed next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from elasticps.config import Config, current
from elasticps.data.from_table import TableSource, as_table, load_schema, write_dataset
from elasticps.data.infer import infer_schema
from elasticps.data.manifest import read_manifest
from elasticps.data.schema import Schema
from elasticps.data.write_defaults import DEFAULT_ROWS_PER_CHUNK
from elasticps.errors import ConfigError, DataError
from elasticps.store import Compare, Put, Store, open_store
from elasticps.store.api import EventType
from elasticps.store.keys import InitMarker, TableDataset, table_keys, table_prefix
from elasticps.telemetry.logfmt import process_node
from elasticps.trainer.dataset_reader import DatasetReader

log = logging.getLogger(__name__)

NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}\Z")
WRITE_TIMEOUT_S = 3600.0  # the most a trainer waits for another to write the table


@dataclass(frozen=True)
class TableReader:
    """A table in memory, trained as a dataset the job writes once (see the module docstring).

    ``like``: another reader (or dataset URL) whose dtypes, statistics and classes this table
    takes: a test split read like its training data. ``url``: the directory (any fsspec URL that
    every process of the job reads) the dataset is written under, by default the job's work
    directory (``WORKDIR/datasets``; a cluster job has none and needs ``url``).
    """

    table: pa.Table = field(repr=False, compare=False)
    schema: Schema | None
    batch_size: int = 512
    chunks_per_task: int = 1
    shuffle_seed: int | None = None
    name: str = "table"
    like: TableReader | DatasetReader | str | None = None
    url: str | None = None
    rows_per_chunk: int | None = None
    label: str | None = None  # the label column, when the schema is guessed
    _resolved: dict[str, DatasetReader] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(f"table name={self.name!r} must be 1-63 lower-case letters, "
                              "digits, '_', '.' or '-', starting with a letter or digit")
        if self.batch_size < 1:
            raise ConfigError(f"reader batch_size={self.batch_size!r} must be >= 1")
        if self.chunks_per_task < 1:
            raise ConfigError(f"reader chunks_per_task={self.chunks_per_task!r} must be >= 1")
        if self.rows_per_chunk is not None and self.rows_per_chunk < 1:
            raise ConfigError(f"rows_per_chunk={self.rows_per_chunk!r} must be >= 1")
        if self.table.num_rows == 0:
            raise ConfigError(f"table {self.name!r} has no rows to train on")

    def in_job(self, config: Config | None = None) -> DatasetReader:
        """The dataset this table is in the current job (written by the first trainer to get
        here); the same reader on every call."""
        if "reader" not in self._resolved:
            self._resolved["reader"] = self._dataset(config or current())
        return self._resolved["reader"]

    def _dataset(self, config: Config) -> DatasetReader:
        if config.store is None:
            raise ConfigError(f"table {self.name!r} is trained inside a job: its trainers write "
                              "it once as the job's dataset (run the script with `elasticps "
                              "run`, or call dist_train, which starts the job)")
        root = self.url or (f"{config.workdir.rstrip('/')}/datasets" if config.workdir else None)
        if root is None:
            raise ConfigError(f"table {self.name!r}: this job has no work directory to write "
                              "it in; pass url= (a directory every process of the job reads, "
                              "e.g. s3://bucket/datasets)")
        like = self._like_url(config)
        schema = self.schema if self.schema is not None else self._guessed_schema()
        fingerprint = table_fingerprint(self.table, schema, self.rows_per_chunk, like)
        target = f"{root.rstrip('/')}/{self.name}-{fingerprint[:16]}"
        owner = process_node("trainer", config.trainer_id)
        with open_store(config.store, config.job_name) as store:
            written = _write_once(store, self.name, owner, config.lease_ttl,
                                  lambda: self._write(target, schema, fingerprint, like, owner),
                                  TableDataset(target, fingerprint, owner))
        if written.fingerprint != fingerprint:
            raise ConfigError(
                f"trainer {owner} built table {self.name!r} with fingerprint {fingerprint[:16]}, "
                f"but the job trains on the one {written.by} built ({written.fingerprint[:16]}, "
                f"at {written.url}): every trainer must build the same table (seed any "
                "sampling; make nothing depend on the trainer's index)")
        return DatasetReader(written.url, self.batch_size, self.chunks_per_task,
                             shuffle_seed=self.shuffle_seed)

    def _like_url(self, config: Config) -> str | None:
        if isinstance(self.like, TableReader):
            return self.like.in_job(config).dataset_url
        if isinstance(self.like, DatasetReader):
            return self.like.dataset_url
        return self.like

    def _guessed_schema(self) -> Schema:
        text = infer_schema(TableSource(self.table, self.name), label=self.label)
        log.info("Table %r has no schema; it trains with this guess (pass schema= to change "
                 "it):\n%s", self.name, text)
        return Schema.from_yaml(text, where=f"the guessed schema of table {self.name!r}")

    def _write(self, target: str, schema: Schema, fingerprint: str, like: str | None,
               owner: str) -> None:
        if _holds(target, fingerprint):
            log.info("Trainer %s found table %r already written at %s; it is used as it is.",
                     owner, self.name, target)
            return
        started = time.monotonic()
        report = write_dataset(self.table, target, schema, overwrite=True, like=like,
                               rows_per_chunk=self.rows_per_chunk or DEFAULT_ROWS_PER_CHUNK,
                               source_info={"fingerprint": fingerprint, "table": self.name})
        log.info("Trainer %s wrote table %r (%d rows, %d chunks) to %s in %.2fs.", owner,
                 self.name, report.rows, len(report.manifest.chunks) if report.manifest else 0,
                 target, time.monotonic() - started)


def from_pandas(frame: Any, schema: Any = None, batch_size: int = 512, **options: Any
                ) -> TableReader:
    """Train on a pandas DataFrame (see :class:`TableReader` for ``options``)."""
    if not (type(frame).__module__.startswith("pandas") and hasattr(frame, "columns")):
        raise ConfigError(f"from_pandas takes a pandas DataFrame, not {type(frame).__name__}; "
                          "from_arrow takes a pyarrow Table or a dict of arrays")
    return _reader(frame, schema, batch_size, options)


def from_arrow(table: Any, schema: Any = None, batch_size: int = 512, **options: Any
               ) -> TableReader:
    """Train on a pyarrow Table (or RecordBatch, or a dict of column arrays)."""
    return _reader(table, schema, batch_size, options)


def _reader(source: Any, schema: Any, batch_size: int, options: dict[str, Any]) -> TableReader:
    try:
        table, _ = as_table(source)
    except DataError as exc:
        raise ConfigError(str(exc)) from exc
    return TableReader(table.combine_chunks(), None if schema is None else load_schema(schema),
                       batch_size, **options)


def table_fingerprint(table: pa.Table, schema: Schema, rows_per_chunk: int | None,
                      like: str | None) -> str:
    """SHA-256 of what the dataset is made of: the table's Arrow data, the schema, the chunking
    and the dataset it is read like."""
    digest = hashlib.sha256(json.dumps(
        {"schema": schema.to_dict(), "rows_per_chunk": rows_per_chunk, "like": like},
        sort_keys=True, default=str).encode())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest.update(sink.getvalue())
    return digest.hexdigest()


def _holds(url: str, fingerprint: str) -> bool:
    """Whether ``url`` holds a complete dataset written from a table of this fingerprint."""
    try:
        return read_manifest(url).source.get("fingerprint") == fingerprint
    except (DataError, OSError):
        return False


def _write_once(store: Store, name: str, owner: str, ttl: int, write: Any,
                result: TableDataset) -> TableDataset:
    """Run ``write`` in one trainer at a time until one finished; every caller gets where."""
    lock, done = table_keys(name)
    deadline = time.monotonic() + WRITE_TIMEOUT_S
    while time.monotonic() < deadline:
        revision = store.revision()
        kv = store.get(done)
        if kv is not None:
            return TableDataset.decode(kv.value, done)
        lease = store.grant_lease(ttl)
        won = store.txn([Compare.missing(lock)],
                        [Put(lock, InitMarker(owner, "lock").encode(), lease.id)]).succeeded
        if won:
            lease.keep_alive()
            try:
                write()
                store.put(done, result.encode())
            finally:
                lease.revoke()
            return result
        lease.revoke()
        log.info("Trainer %s waits for another trainer to write table %r.", owner, name)
        _wait_for_writer(store, name, revision, deadline)
    raise ConfigError(f"no trainer wrote table {name!r} within {WRITE_TIMEOUT_S:.0f}s")


def _wait_for_writer(store: Store, name: str, revision: int, deadline: float) -> None:
    """Until the writer published the dataset or let its lock go (it died)."""
    lock, done = table_keys(name)
    with store.watch_prefix(table_prefix(name), start_revision=revision + 1) as watch:
        if store.get(lock) is None or store.get(done) is not None:
            return
        while (remaining := deadline - time.monotonic()) > 0:
            event = watch.get(timeout=remaining)
            if event is not None and (event.key == done or
                                      (event.key == lock and event.type is EventType.DELETE)):
                return
