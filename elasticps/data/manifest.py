"""The dataset manifest: a small JSON file that says what a dataset directory holds.

A dataset directory holds Parquet files (``part-00000.parquet``, ...) and ``manifest.json``.
Two formats are read:

* ``"elasticps-dataset"``, format version 2: a dataset with a declared schema (written by
  ``elasticps data convert csv|tsv|parquet|jsonl|text|criteo`` and ``write_dataset``)::

    {
      "format": "elasticps-dataset", "format_version": 2,
      "schema": {"labels": [...], "weight": null, "missing": [...], "tables": {...},
                 "columns": {"age": {"kind": "dense", "dtype": "float", "norm": "standard",
                                     "stats": {"count": .., "mean": .., ...}, ...}, ...}},
      "columns": [{"name": "clicked", "type": "int8", "nullable": false}, ...],
      "num_rows": 1000000, "num_positive": 254311,
      "chunks": [{"path": "part-00000.parquet", "row_group": 0, "num_rows": 65536}, ...],
      "null_counts": {"age": 4211, ...},
      "files": {"vocab": "vocab.txt"},                 # other files of the dataset, by role
      "splits": {"test": "test"}, "source": {...}, "created_by": "elasticps 0.1.0",
      "best_auc": null, "best_logloss": null, "planted_model": null
    }

  ``schema`` is :meth:`elasticps.data.schema.Schema.to_dict`: every option explicit, with the
  dense statistics measured at conversion; ``columns`` lists the Parquet columns.

* ``"elasticps-ctr"``, format version 1: the Criteo layout (written by ``elasticps data synth
  ctr``), whose ``schema`` is the list of Parquet columns. Its declared
  schema is the built-in Criteo preset (:func:`elasticps.data.criteo_schema.criteo_preset`).

Either way :attr:`Manifest.schema` is the declared :class:`~elasticps.data.schema.Schema` and
:attr:`Manifest.columns` the Parquet columns. Another format or version is a :class:`DataError`.

A chunk is one Parquet row group; the master hands chunks out as tasks. Writers write the data
files first and the manifest last (atomically where the filesystem can rename), so a directory
with a manifest is always complete. Reading a manifest loads neither numpy nor pyarrow.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

import fsspec

from elasticps.data.criteo_schema import criteo_preset
from elasticps.data.locations import check_relative
from elasticps.data.schema import Schema
from elasticps.errors import ConfigError, DataError

FORMAT = "elasticps-dataset"  # format 2: a declared schema
FORMAT_VERSION = 2
CRITEO_FORMAT = "elasticps-ctr"  # format 1: the Criteo layout, schema implied
CRITEO_FORMAT_VERSION = 1
FORMATS = {FORMAT: FORMAT_VERSION, CRITEO_FORMAT: CRITEO_FORMAT_VERSION}
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 256 << 20  # a million chunks is ~70 MB of JSON


@dataclass(frozen=True)
class ChunkRef:
    """One chunk: row group ``row_group`` of ``path``, a relative path inside the dataset
    directory (never absolute, never a URL: see :mod:`elasticps.data.locations`)."""

    path: str
    row_group: int
    num_rows: int

    @property
    def key(self) -> str:
        """A stable name for the chunk, e.g. ``part-00000.parquet#3``."""
        return f"{self.path}#{self.row_group}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "row_group": self.row_group, "num_rows": self.num_rows}

    @classmethod
    def from_dict(cls, raw: Any, where: str = "chunk") -> ChunkRef:
        if not isinstance(raw, dict):
            raise DataError(f"{where} must be an object, got {raw!r}")
        path = raw.get("path")
        row_group = raw.get("row_group")
        num_rows = raw.get("num_rows")
        path = check_relative(path, f"{where}: 'path'")
        for name, value in (("row_group", row_group), ("num_rows", num_rows)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**40:
                raise DataError(f"{where}: {name!r} must be an integer in [0, 2^40), got "
                                f"{value!r:.40}")
        assert isinstance(row_group, int)
        assert isinstance(num_rows, int)
        return cls(path=path, row_group=row_group, num_rows=num_rows)


@dataclass(frozen=True)
class Manifest:
    """What a dataset directory holds. ``label_rate`` is derived from ``num_positive`` (the
    rows whose first label is 1, for binary labels; 0 for other kinds)."""

    num_rows: int
    num_positive: int
    chunks: tuple[ChunkRef, ...]
    schema: Schema  # the declared schema (format 1: the Criteo preset)
    columns: tuple[dict[str, Any], ...]  # the Parquet columns: {name, type, nullable}
    null_counts: dict[str, int] = field(default_factory=dict)
    best_auc: float | None = None
    best_logloss: float | None = None
    planted_model: dict[str, Any] | None = None
    splits: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    files: dict[str, str] = field(default_factory=dict)  # other files by role (format 2)
    format_version: int = FORMAT_VERSION

    @property
    def format(self) -> str:
        return CRITEO_FORMAT if self.format_version == CRITEO_FORMAT_VERSION else FORMAT

    @property
    def is_criteo_layout(self) -> bool:
        """Format 1: read as the Criteo preset, with a ``FeatureConfig`` if one is given."""
        return self.format_version == CRITEO_FORMAT_VERSION

    @property
    def label_rate(self) -> float:
        return self.num_positive / self.num_rows if self.num_rows else 0.0

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(str(col["name"]) for col in self.columns)

    def to_json(self) -> str:
        body: dict[str, Any] = {"format": self.format}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name == "chunks":
                value = [chunk.to_dict() for chunk in value]
            elif item.name == "schema":
                # Format 1 keeps its original shape: "schema" is the Parquet column list.
                value = list(self.columns) if self.is_criteo_layout else value.to_dict()
            elif item.name == "columns":
                if self.is_criteo_layout:
                    continue
                value = list(value)
            elif item.name == "files" and self.is_criteo_layout:
                continue
            body[item.name] = value
        # One line per top-level field and per chunk: readable, and small for many chunks.
        lines = []
        for key, value in body.items():
            if key == "chunks" and value:
                inner = ",\n".join("  " + json.dumps(chunk) for chunk in value)
                lines.append(f' "chunks": [\n{inner}\n ]')
            else:
                lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    @classmethod
    def from_json(cls, text: str | bytes, where: str = MANIFEST_NAME) -> Manifest:
        if len(text) > MAX_MANIFEST_BYTES:
            raise DataError(f"{where} is larger than {MAX_MANIFEST_BYTES >> 20} MiB")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DataError(f"{where} is not valid JSON: {exc!s:.200}") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("format"), str) or \
                raw["format"] not in FORMATS:
            got = raw.get("format") if isinstance(raw, dict) else raw
            raise DataError(f"{where} is not an elasticps dataset manifest (format is "
                            f"{got!r:.80}; this elasticps reads "
                            f"{' and '.join(sorted(FORMATS))})")
        version = raw.get("format_version")
        if version != FORMATS[raw["format"]]:
            raise DataError(
                f"{where} has format_version {version!r:.40} of format {raw['format']!r}; this "
                f"elasticps reads version {FORMATS[raw['format']]} of it (a newer elasticps "
                "wrote it?)")
        raw_chunks = raw.get("chunks")
        if not isinstance(raw_chunks, list):
            raise DataError(f"{where}: 'chunks' must be a list, got {raw_chunks!r:.80}")
        chunks = tuple(
            ChunkRef.from_dict(item, f"{where} chunks[{i}]") for i, item in enumerate(raw_chunks)
        )
        num_rows = _nonneg_int(raw, "num_rows", where)
        if sum(chunk.num_rows for chunk in chunks) != num_rows:
            raise DataError(
                f"{where}: num_rows is {num_rows} but the chunks hold "
                f"{sum(chunk.num_rows for chunk in chunks)} rows"
            )
        if version == CRITEO_FORMAT_VERSION:
            schema, columns = criteo_preset(), _column_list(raw.get("schema"), "schema", where)
        else:
            schema = _declared_schema(raw.get("schema"), where)
            columns = _column_list(raw.get("columns"), "columns", where)
        return cls(
            num_rows=num_rows,
            num_positive=_nonneg_int(raw, "num_positive", where),
            chunks=chunks,
            schema=schema,
            columns=columns,
            null_counts=_count_map(raw, "null_counts", where),
            best_auc=_opt_float(raw, "best_auc", where),
            best_logloss=_opt_float(raw, "best_logloss", where),
            planted_model=_opt_object(raw, "planted_model", where),
            splits=_path_map(raw, "splits", where),
            source=_opt_object(raw, "source", where) or {},
            created_by=str(raw.get("created_by", ""))[:256],
            files=_path_map(raw, "files", where),
            format_version=version,
        )


def _column_list(raw: Any, name: str, where: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list) or not all(isinstance(c, dict) and "name" in c for c in raw):
        raise DataError(f"{where}: {name!r} must be a list of {{name, type}} objects")
    return tuple(raw)


def _declared_schema(raw: Any, where: str) -> Schema:
    try:
        schema = Schema.from_dict(raw, f"{where}: schema")
    except ConfigError as exc:
        raise DataError(str(exc)) from exc
    for column in schema.columns:
        if column.dtype is None:
            raise DataError(f"{where}: schema: column {column.name!r} has no dtype (a "
                            "converter always records it)")
        if column.kind == "dense" and column.norm in ("standard", "minmax") and (
                column.stats is None):
            raise DataError(f"{where}: schema: dense column {column.name!r} normalises by "
                            f"{column.norm} but has no stats")
    return schema


def _path_map(raw: dict[str, Any], name: str, where: str) -> dict[str, str]:
    """A map of names to relative paths inside the dataset (splits, other files)."""
    value = raw.get(name) or {}
    if not isinstance(value, dict):
        raise DataError(f"{where}: {name!r} must be an object, got {value!r:.80}")
    return {str(k): check_relative(v, f"{where}: {name}[{k!r:.40}]") for k, v in value.items()}


def _count_map(raw: dict[str, Any], name: str, where: str) -> dict[str, int]:
    value = raw.get(name) or {}
    if not isinstance(value, dict) or not all(
            type(v) is int and v >= 0 for v in value.values()):
        raise DataError(f"{where}: {name!r} must map names to counts")
    return {str(k): v for k, v in value.items()}


def _opt_object(raw: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    value = raw.get(name)
    if value is not None and not isinstance(value, dict):
        raise DataError(f"{where}: {name!r} must be an object or null, got {value!r:.80}")
    return value


def read_manifest(url: str) -> Manifest:
    """The manifest of the dataset directory at ``url`` (a local path or any fsspec URL).

    Reads one small JSON file and no data: the master uses it to list chunks without loading
    pyarrow.
    """
    manifest_url = url.rstrip("/") + "/" + MANIFEST_NAME
    try:
        with fsspec.open(manifest_url, "rb") as handle:
            text = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError as exc:
        raise DataError(
            f"{url!r} is not a dataset: it has no {MANIFEST_NAME} (make one with "
            "`elasticps data convert` or `elasticps data synth`)"
        ) from exc
    except (OSError, ValueError, ImportError) as exc:  # ValueError: an unknown protocol
        raise DataError(f"cannot read {manifest_url}: {exc!s:.200}") from exc
    return Manifest.from_json(text, where=manifest_url)


def _nonneg_int(raw: dict[str, Any], name: str, where: str) -> int:
    value = raw.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DataError(f"{where}: {name!r} must be an integer >= 0, got {value!r:.40}")
    return value


def _opt_float(raw: dict[str, Any], name: str, where: str) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or (
            isinstance(value, int) and abs(value) > 2**63) or not math.isfinite(value):
        raise DataError(f"{where}: {name!r} must be a finite number or null, got "
                        f"{value!r:.40}")
    return float(value)
