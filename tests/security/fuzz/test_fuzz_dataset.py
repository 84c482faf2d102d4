"""Fuzz: dataset manifests (format 1 and 2) and declared schemas with any value in any field;
only DataError (manifests) or ConfigError (schemas) comes out, and a manifest that parses
names only relative paths inside the dataset."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given

from elasticps.data.locations import resolve
from elasticps.data.manifest import Manifest
from elasticps.data.schema import Schema
from elasticps.errors import ConfigError, DataError
from tests.security.fuzz.common import FUZZ, json_values, with_fields

SCHEMA: dict[str, Any] = {
    "label": "clicked", "missing": ["", "NA"],
    "columns": {"age": {"kind": "dense", "dtype": "float", "norm": "none"},
                "country": {"kind": "categorical", "dtype": "string"},
                "genres": {"kind": "multi_categorical", "sep": "|", "dtype": "string"}},
}
V2: dict[str, Any] = {
    "format": "elasticps-dataset", "format_version": 2, "schema": SCHEMA,
    "columns": [{"name": "clicked", "type": "int8", "nullable": False}],
    "num_rows": 30, "num_positive": 10,
    "chunks": [{"path": "part-00000.parquet", "row_group": 0, "num_rows": 10},
               {"path": "sub/part-00001.parquet", "row_group": 1, "num_rows": 20}],
    "null_counts": {"age": 1}, "files": {"vocab": "vocab.txt"}, "splits": {"test": "test"},
    "source": {"inputs": ["x.csv"]}, "created_by": "elasticps", "best_auc": None,
    "best_logloss": None, "planted_model": None,
}
V1 = {**{k: v for k, v in V2.items() if k not in ("columns", "files")},
      "format": "elasticps-ctr", "format_version": 1,
      "schema": [{"name": "label", "type": "int8"}]}
CHUNK = V2["chunks"][0]


def _parse(doc: Any) -> None:
    try:
        manifest = Manifest.from_json(json.dumps(doc))
    except DataError:
        return
    for chunk in manifest.chunks:
        assert resolve("file:///data/ds", chunk.path).startswith("file:///data/ds/")
    for path in (*manifest.splits.values(), *manifest.files.values()):
        assert resolve("s3://b/ds", path).startswith("s3://b/ds/")


@pytest.mark.timeout(60)
@FUZZ
@given(doc=with_fields(V2, sorted(V2)) | with_fields(V1, sorted(V1)) | json_values)
def test_dataset_manifest_raises_only_data_error(doc: Any) -> None:
    _parse(doc)


@pytest.mark.timeout(60)
@FUZZ
@given(chunk=with_fields(CHUNK, sorted(CHUNK)))
def test_chunk_paths_stay_inside_the_dataset(chunk: Any) -> None:
    _parse({**V2, "chunks": [chunk], "num_rows": chunk.get("num_rows")})


@pytest.mark.timeout(60)
@FUZZ
@given(doc=with_fields(SCHEMA, ["label", "missing", "columns", "labels", "weight", "tables",
                                "defaults"]),
       column=with_fields(SCHEMA["columns"]["age"], ["kind", "dtype", "norm", "stats", "table",
                                                     "dim", "id_space", "sep", "salt"]))
def test_declared_schema_raises_only_config_error(doc: dict[str, Any],
                                                  column: dict[str, Any]) -> None:
    for candidate in (doc, {**SCHEMA, "columns": {"c": column, "clicked2": "dense"}}):
        with contextlib.suppress(ConfigError):
            Schema.from_dict(candidate)


def test_the_fuzzed_bases_are_valid() -> None:
    """The fuzzers start near valid documents: these parse."""
    assert Manifest.from_json(json.dumps(V2)).num_rows == 30
    assert Manifest.from_json(json.dumps(V1)).is_criteo_layout
    assert Schema.from_dict(SCHEMA).label_kind == "binary"
