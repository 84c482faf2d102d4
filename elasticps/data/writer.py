"""Writes a dataset directory: Parquet row groups of a fixed size, then the manifest.

Row groups are the chunks the master hands out, so each one holds exactly ``rows_per_chunk`` rows
(the last may hold fewer), except that a dataset whose rows all fit in one chunk is split into up
to ``min_chunks`` equal ones of at least ``SMALL_CHUNK_ROWS`` rows, so that a small dataset still
makes a task for each of several trainers. A new ``part-NNNNN.parquet`` file starts every
``chunks_per_file`` chunks, so large datasets are many files of bounded size. Memory stays
bounded by one chunk.
Data files are written first and the manifest last; on failure the files written so far are
deleted, so a directory never holds a manifest that points at missing data. Used as a context
manager, a clean exit commits (``close()`` unless it was called) and an exception aborts. On a
local disk the dataset is its owner's alone: the directory 0700 before any file goes in, every
file 0600, whatever the umask.

Without a declared ``schema`` the writer writes format 1 (the Criteo layout of ``synth ctr``);
with one, format 2, whose manifest carries the schema (``close(schema=...)``
replaces it with the one conversion measured, dense statistics included).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import TracebackType
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from elasticps.data.criteo_layout import LABEL, schema_description
from elasticps.data.criteo_schema import criteo_preset
from elasticps.data.manifest import (
    CRITEO_FORMAT_VERSION,
    FORMAT_VERSION,
    MANIFEST_NAME,
    ChunkRef,
    Manifest,
)
from elasticps.data.schema import Schema
from elasticps.data.write_defaults import (
    COMPRESSIONS,
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
    SMALL_CHUNK_ROWS,
)
from elasticps.errors import DataError
from elasticps.private_files import make_private_dir, private_handle
from elasticps.safe_files import is_local
from elasticps.version import __version__

log = logging.getLogger(__name__)


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name


class DatasetWriter:
    """Accumulates tables and writes fixed-size row groups; ``close()`` writes the manifest."""

    def __init__(
        self,
        out_url: str,
        arrow_schema: pa.Schema,
        *,
        rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK,
        chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE,
        compression: str = DEFAULT_COMPRESSION,
        overwrite: bool = False,
        schema: Schema | None = None,
        min_chunks: int = 1,
    ) -> None:
        if rows_per_chunk < 1:
            raise DataError(f"rows_per_chunk={rows_per_chunk} must be >= 1")
        if min_chunks < 1:
            raise DataError(f"min_chunks={min_chunks} must be >= 1")
        if chunks_per_file < 1:
            raise DataError(f"chunks_per_file={chunks_per_file} must be >= 1")
        if compression not in COMPRESSIONS:
            raise DataError(f"compression={compression!r} is not one of {', '.join(COMPRESSIONS)}")
        self.out_url = out_url
        self.schema = arrow_schema
        self.declared = schema
        # The column whose ones are counted as positives: a binary (first) label.
        self._positive_column: str | None = LABEL
        if schema is not None:
            first = schema.labels[0]
            self._positive_column = first.name if first.kind == "binary" else None
        self.rows_per_chunk = rows_per_chunk
        self.min_chunks = min_chunks
        self.chunks_per_file = chunks_per_file
        self.compression = compression
        self.fs, self.root = fsspec.core.url_to_fs(out_url)
        self._local = is_local(self.fs)
        self._prepare_dir(overwrite)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._file: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._file_index = -1
        self._groups_in_file = 0
        self._written: list[str] = []
        self.chunks: list[ChunkRef] = []
        self.num_rows = 0
        self.num_positive = 0
        self.null_counts: dict[str, int] = {name: 0 for name in arrow_schema.names}
        self.files: dict[str, str] = {}
        self.closed = False

    def _prepare_dir(self, overwrite: bool) -> None:
        self._created_root = not self.fs.exists(self.root)
        if self._created_root:
            self._make_root()
            return
        if not self.fs.isdir(self.root):
            raise DataError(f"output {self.out_url!r} exists and is not a directory")
        entries = self.fs.ls(self.root, detail=False)
        if not entries:
            self._make_root()
            return
        if not overwrite:
            raise DataError(
                f"output directory {self.out_url!r} is not empty; choose a new directory or "
                "pass --overwrite to replace the dataset in it"
            )
        names = {str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries}
        # The manifest goes first, so an interrupted overwrite never leaves a valid-looking dataset.
        others: set[str] = set()  # the old dataset's other files (format 2), e.g. a vocabulary
        if MANIFEST_NAME in names:
            others = self._other_files()
            self.fs.rm(_join(self.root, MANIFEST_NAME))
        for name in sorted(names):
            if name in others or (name.startswith("part-") and name.endswith(".parquet")):
                self.fs.rm(_join(self.root, name))
            elif self.fs.isdir(_join(self.root, name)) and self.fs.exists(
                _join(_join(self.root, name), MANIFEST_NAME)
            ):
                self.fs.rm(_join(self.root, name), recursive=True)  # an old split, e.g. test/
        log.info("Removed the old dataset in %s to overwrite it.", self.out_url)
        self._make_root()

    def _make_root(self) -> None:
        """The dataset's directory; on a local disk its owner's alone (0700), before any file
        goes in."""
        if self._local:
            make_private_dir(Path(self.root), what="the dataset directory")
        else:
            self.fs.makedirs(self.root, exist_ok=True)

    def _open(self, path: str, mode: str) -> Any:
        """A file of the dataset, opened for writing; on a local disk 0600 before a byte is
        written."""
        handle = self.fs.open(path, mode)
        if self._local:
            private_handle(handle)
        return handle

    def _other_files(self) -> set[str]:
        try:
            with self.fs.open(_join(self.root, MANIFEST_NAME), "rb") as handle:
                files = json.loads(handle.read()).get("files") or {}
            return {str(name) for name in files.values() if "/" not in str(name)}
        except (OSError, ValueError, AttributeError):
            return set()  # an unreadable old manifest: its data files still go

    def write(self, table: pa.Table) -> None:
        """Add rows; full chunks are written out at once."""
        if table.num_rows == 0:
            return
        if table.schema != self.schema:
            table = table.cast(self.schema)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        while self._pending_rows >= self.rows_per_chunk:
            self._flush(self.rows_per_chunk)

    def _flush(self, rows: int) -> None:
        pending = pa.concat_tables(self._pending)
        chunk, rest = pending.slice(0, rows), pending.slice(rows)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows
        if self._writer is None or self._groups_in_file >= self.chunks_per_file:
            self._open_next_file()
        assert self._writer is not None
        self._writer.write_table(chunk.combine_chunks(), row_group_size=rows)
        self.chunks.append(ChunkRef(self._part_name(), self._groups_in_file, chunk.num_rows))
        self._groups_in_file += 1
        self.num_rows += chunk.num_rows
        if self._positive_column is not None:
            self.num_positive += int(pc.sum(chunk.column(self._positive_column)).as_py() or 0)
        for name in self.schema.names:
            self.null_counts[name] += chunk.column(name).null_count

    def _split_small(self) -> None:
        """Every row fits in one chunk: write up to ``min_chunks`` equal ones instead."""
        parts = max(1, min(self.min_chunks, self._pending_rows // SMALL_CHUNK_ROWS))
        size = -(-self._pending_rows // parts)
        while self._pending_rows:
            self._flush(min(size, self._pending_rows))

    def write_file(self, role: str, name: str, data: bytes) -> None:
        """Write another file of the dataset (e.g. a vocabulary), named in the manifest's
        ``files`` under ``role``; deleted with the data files if the run fails."""
        if self.declared is None:
            raise DataError("a Criteo-layout (format 1) dataset has no other files")
        if "/" in name or name == MANIFEST_NAME or name.startswith("part-"):
            raise DataError(f"{name!r} is not a name for a file of the dataset")
        path = _join(self.root, name)
        self._written.append(path)
        with self._open(path, "wb") as out:
            out.write(data)
        self.files[role] = name

    def _part_name(self) -> str:
        return f"part-{self._file_index:05d}.parquet"

    def _open_next_file(self) -> None:
        self._close_file()
        self._file_index += 1
        self._groups_in_file = 0
        path = _join(self.root, self._part_name())
        self._written.append(path)
        self._file = self._open(path, "wb")
        self._writer = pq.ParquetWriter(
            self._file,
            self.schema,
            compression=None if self.compression == "none" else self.compression,
            use_dictionary=True,
            write_statistics=False,
        )

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self, *, schema: Schema | None = None, **fields: Any) -> Manifest:
        """Write the last partial chunk and the manifest; ``fields`` fill the manifest, and
        ``schema`` (format 2) replaces the declared schema, e.g. with measured statistics."""
        if self.closed:
            raise DataError(f"the dataset writer of {self.out_url} is already closed")
        if schema is not None and self.declared is None:
            raise DataError("a Criteo-layout (format 1) dataset has no declared schema to set")
        if self._pending_rows and not self.chunks:
            self._split_small()
        elif self._pending_rows:
            self._flush(self._pending_rows)
        self._close_file()
        if self.declared is None:
            declared, columns = None, schema_description(with_p_true="p_true" in self.schema.names)
        else:
            declared = schema or self.declared
            columns = [{"name": f.name, "type": str(f.type), "nullable": f.nullable}
                       for f in self.schema]
        if self.files:
            fields = {"files": dict(self.files), **fields}
        manifest = Manifest(
            num_rows=self.num_rows,
            num_positive=self.num_positive,
            chunks=tuple(self.chunks),
            schema=declared or criteo_preset(),
            columns=tuple(columns),
            null_counts=dict(self.null_counts),
            created_by=f"elasticps {__version__}",
            format_version=CRITEO_FORMAT_VERSION if declared is None else FORMAT_VERSION,
            **fields,
        )
        write_manifest(self.fs, self.root, manifest, private=self._local)
        self.closed = True
        return manifest

    def abort(self) -> None:
        """Delete what was written; the output directory is left as it was found."""
        if self.closed:
            return  # committed: a manifest points at these files now
        try:
            self._close_file()
        except Exception:  # cleanup must go on; the original error matters
            log.debug("Closing a partial Parquet file during abort failed.", exc_info=True)
        for path in self._written:
            if self.fs.exists(path):
                self.fs.rm(path)
        if self._created_root and self.fs.exists(self.root) and not self.fs.ls(self.root):
            self.fs.rmdir(self.root)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.closed:
            try:
                self.close()
            except BaseException:
                self.abort()
                raise


def write_manifest(fs: Any, root: str, manifest: Manifest, *, private: bool = False) -> None:
    """Write ``manifest.json`` via a temporary name and a rename (atomic on local disks);
    ``private``: 0600 (a local disk)."""
    final = _join(root, MANIFEST_NAME)
    tmp = final + ".tmp"
    with fs.open(tmp, "w") as out:
        if private:
            private_handle(out)
        out.write(manifest.to_json())
    fs.mv(tmp, final)
