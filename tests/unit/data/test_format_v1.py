"""Format-1 datasets (the Criteo layout, written before declared schemas) read as before."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from elasticps.data import (
    Batch,
    FeatureConfig,
    chunk_decode,
    dataset,
    iter_batches,
    open_dataset,
    read_manifest,
)
from elasticps.data.criteo_layout import DENSE_COLUMNS
from elasticps.data.criteo_schema import CLIP_MAX, CLIP_MIN, criteo_preset
from elasticps.data.manifest import Manifest
from elasticps.errors import DataError
from tests.helpers import REPO
from tests.unit.data.v1_batches import (
    DENSE_ATOL,
    DENSE_RTOL,
    mismatches,
    read_reference,
    v1_batches,
)

V1 = REPO / "tests" / "data" / "v1_ctr"

REFERENCE = REPO / "tests" / "data" / "v1_ctr_batches.npz"


def test_a_format_1_dataset_yields_the_batches_it_did_before_schemas() -> None:
    assert mismatches(v1_batches(str(V1)), read_reference(REFERENCE)) == []


def _scaled(normalize: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda *args: normalize(*args) * np.float32(1 + 1e-5)


def _two_rows_swapped(permutation: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def swapped(*args: object) -> np.ndarray:
        order = permutation(*args).copy()
        order[[-2, -1]] = order[[-1, -2]]  # past any resume point
        return order
    return swapped


def _one_id_changed(hash_keys: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def changed(*args: object) -> np.ndarray:
        ids = hash_keys(*args).copy()
        ids[-1] = (ids[-1] + 1) % args[2]
        return ids
    return changed


def _last_row_dropped(decode: Callable[..., Batch]) -> Callable[..., Batch]:
    return lambda *args: (whole := decode(*args)).slice(0, len(whole) - 1)


@pytest.mark.parametrize(("module", "name", "wrong", "broken"), [
    (chunk_decode, "normalize_column", _scaled, "/dense"),
    (dataset, "chunk_permutation", _two_rows_swapped, "/exact"),
    (chunk_decode, "hash_keys", _one_id_changed, "/exact"),
    (dataset, "decode_table", _last_row_dropped, "/sizes"),
], ids=["dense-off-by-1e-5", "two-rows-swapped", "one-id-changed", "a-row-lost"])
def test_the_reference_catches_a_reader_that_changes_values_order_or_boundaries(
        monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str,
        wrong: Callable[[Callable[..., Any]], Callable[..., Any]], broken: str) -> None:
    monkeypatch.setattr(module, name, wrong(getattr(module, name)))
    problems = mismatches(v1_batches(str(V1)), read_reference(REFERENCE))
    assert problems
    assert any(broken in line for line in problems), problems


@pytest.mark.parametrize("norm", ["minmax", "log", "log-missing", "none"])
def test_format_1_dense_values_follow_the_documented_formula(norm: str) -> None:
    import pyarrow.parquet as pq

    raw = pq.read_table(V1 / "part-00000.parquet", columns=list(DENSE_COLUMNS))
    x = np.stack([c.to_numpy(zero_copy_only=False) for c in raw.columns], axis=1)
    missing = np.isnan(x)
    low, high = np.array(CLIP_MIN, float), np.array(CLIP_MAX, float)
    want = {"minmax": (np.clip(x, low, high) - low) / (high - low),
            "log": np.log1p(np.maximum(x, 0)), "log-missing": np.log1p(np.maximum(x, 0)),
            "none": x}[norm]
    want[missing] = -1.0 if norm == "log-missing" else 0.0
    got = np.concatenate([b.dense for b in open_dataset(str(V1)).iter_batches(
        64, features=FeatureConfig(dense_norm=norm))])
    np.testing.assert_allclose(got, want, rtol=DENSE_RTOL, atol=DENSE_ATOL)


def test_a_format_1_manifest_declares_the_criteo_preset_and_round_trips() -> None:
    manifest = read_manifest(str(V1))
    assert manifest.is_criteo_layout
    assert manifest.schema == criteo_preset()
    assert manifest.schema.label_kind == "binary"
    assert [c.name for c in manifest.schema.dense_columns] == [f"I{i}" for i in range(1, 14)]
    assert {c.table for c in manifest.schema.categorical_columns} == {"features"}
    assert [c.hash_salt for c in manifest.schema.categorical_columns] == list(range(26))
    # Written back, it is the same file: format 1 keeps its shape.
    assert manifest.to_json() == (V1 / "manifest.json").read_text()
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_reading_a_manifest_loads_neither_numpy_nor_pyarrow() -> None:
    import subprocess
    import sys

    script = ("import sys; from elasticps.data.manifest import read_manifest; "
              f"m = read_manifest({str(V1)!r}); print(m.schema.label_kind, len(m.chunks)); "
              "print(sorted(k for k in sys.modules if k in ('numpy', 'pyarrow')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split("\n")[:2] == ["binary 3", "[]"]


@pytest.mark.parametrize(("doc", "match"), [
    ({"format": "elasticps-ctr", "format_version": 2}, "format_version 2 of format"),
    ({"format": "elasticps-dataset", "format_version": 3}, "format_version 3 of format"),
    ({"format": "elasticps-dataset", "format_version": 1}, "format_version 1 of format"),
    ({"format": "parquet-thing", "format_version": 1}, "format is 'parquet-thing'"),
])
def test_an_unknown_format_or_version_is_a_clear_data_error(
        tmp_path: Path, doc: dict[str, object], match: str) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(DataError, match=match):
        read_manifest(str(tmp_path))


def test_a_format_1_dataset_whose_file_lost_a_column_names_file_and_column(
        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    copy = tmp_path / "v1"
    shutil.copytree(V1, copy)
    part = copy / "part-00000.parquet"
    table = pq.read_table(part).drop_columns(["C7"])
    pq.write_table(table, part, row_group_size=200)
    chunk = read_manifest(str(copy)).chunks[0]
    with pytest.raises(DataError, match=r"part-00000\.parquet: column\(s\) 'C7'"):
        list(iter_batches(str(copy), chunk, 50))
