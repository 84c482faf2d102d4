"""The dataset manifest: a small JSON file that says what a dataset directory holds.

A dataset directory holds Parquet files (``part-00000.parquet``, ...) and ``manifest.json``::

    {
      "format": "elasticps-ctr", "format_version": 1,
      "schema": [{"name": "label", "type": "int8", "nullable": false}, ...],
      "num_rows": 1000000, "num_positive": 254311,
      "chunks": [{"path": "part-00000.parquet", "row_group": 0, "num_rows": 65536}, ...],
      "null_counts": {"I1": 453001, ...},
      "best_auc": 0.8012, "best_logloss": 0.4431,     # synthetic data only, else null
      "planted_model": {...},                          # synthetic data only, else null
      "splits": {"test": "test"},                      # sibling datasets, relative paths
      "source": {"kind": "criteo", ...},
      "created_by": "elasticps 0.1.0"
    }

A chunk is one Parquet row group; the master hands chunks out as tasks. Writers write the data
files first and the manifest last (atomically where the filesystem can rename), so a directory
with a manifest is always complete.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import fsspec

from elasticps.errors import DataError

FORMAT = "elasticps-ctr"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class ChunkRef:
    """One chunk: row group ``row_group`` of ``path`` (relative to the dataset dir, or a URL)."""

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
        if not isinstance(path, str) or not path:
            raise DataError(f"{where}: 'path' must be a non-empty string, got {path!r}")
        for name, value in (("row_group", row_group), ("num_rows", num_rows)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DataError(f"{where}: {name!r} must be an integer >= 0, got {value!r}")
        assert isinstance(row_group, int)
        assert isinstance(num_rows, int)
        return cls(path=path, row_group=row_group, num_rows=num_rows)


@dataclass(frozen=True)
class Manifest:
    """What a dataset directory holds. ``label_rate`` is derived from ``num_positive``."""

    num_rows: int
    num_positive: int
    chunks: tuple[ChunkRef, ...]
    schema: tuple[dict[str, Any], ...]
    null_counts: dict[str, int] = field(default_factory=dict)
    best_auc: float | None = None
    best_logloss: float | None = None
    planted_model: dict[str, Any] | None = None
    splits: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def label_rate(self) -> float:
        return self.num_positive / self.num_rows if self.num_rows else 0.0

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(str(col["name"]) for col in self.schema)

    def to_json(self) -> str:
        body: dict[str, Any] = {"format": FORMAT}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name == "chunks":
                value = [chunk.to_dict() for chunk in value]
            elif item.name == "schema":
                value = list(value)
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
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise DataError(f"{where} is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            got = raw.get("format") if isinstance(raw, dict) else raw
            raise DataError(f"{where} is not an {FORMAT} manifest (format is {got!r})")
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise DataError(
                f"{where} has format_version {version!r}; this elasticps reads version "
                f"{FORMAT_VERSION}"
            )
        raw_chunks = raw.get("chunks")
        if not isinstance(raw_chunks, list):
            raise DataError(f"{where}: 'chunks' must be a list, got {raw_chunks!r}")
        chunks = tuple(
            ChunkRef.from_dict(item, f"{where} chunks[{i}]") for i, item in enumerate(raw_chunks)
        )
        num_rows = _nonneg_int(raw, "num_rows", where)
        if sum(chunk.num_rows for chunk in chunks) != num_rows:
            raise DataError(
                f"{where}: num_rows is {num_rows} but the chunks hold "
                f"{sum(chunk.num_rows for chunk in chunks)} rows"
            )
        schema = raw.get("schema")
        if not isinstance(schema, list) or not all(
            isinstance(col, dict) and "name" in col for col in schema
        ):
            raise DataError(f"{where}: 'schema' must be a list of {{name, type}} objects")
        return cls(
            num_rows=num_rows,
            num_positive=_nonneg_int(raw, "num_positive", where),
            chunks=chunks,
            schema=tuple(schema),
            null_counts={str(k): int(v) for k, v in (raw.get("null_counts") or {}).items()},
            best_auc=_opt_float(raw, "best_auc", where),
            best_logloss=_opt_float(raw, "best_logloss", where),
            planted_model=raw.get("planted_model"),
            splits={str(k): str(v) for k, v in (raw.get("splits") or {}).items()},
            source=dict(raw.get("source") or {}),
            created_by=str(raw.get("created_by", "")),
            format_version=FORMAT_VERSION,
        )


def read_manifest(url: str) -> Manifest:
    """The manifest of the dataset directory at ``url`` (a local path or any fsspec URL).

    Reads one small JSON file and no data: the master uses it to list chunks without loading
    pyarrow.
    """
    manifest_url = url.rstrip("/") + "/" + MANIFEST_NAME
    try:
        with fsspec.open(manifest_url, "rb") as handle:
            text = handle.read()
    except FileNotFoundError as exc:
        raise DataError(
            f"{url!r} is not a dataset: it has no {MANIFEST_NAME} (make one with "
            "`elasticps data convert` or `elasticps data synth`)"
        ) from exc
    except OSError as exc:
        raise DataError(f"cannot read {manifest_url}: {exc}") from exc
    return Manifest.from_json(text, where=manifest_url)


def _nonneg_int(raw: dict[str, Any], name: str, where: str) -> int:
    value = raw.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DataError(f"{where}: {name!r} must be an integer >= 0, got {value!r}")
    return value


def _opt_float(raw: dict[str, Any], name: str, where: str) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise DataError(f"{where}: {name!r} must be a number or null, got {value!r}")
    return float(value)
