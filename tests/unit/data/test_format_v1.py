"""Format-1 datasets (the Criteo layout, written before declared schemas) read as before."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from elasticps.data import FeatureConfig, iter_batches, open_dataset, read_manifest
from elasticps.data.criteo_layout import SPARSE_COLUMNS
from elasticps.data.criteo_preset import criteo_preset
from elasticps.data.manifest import Manifest
from elasticps.errors import DataError
from tests.helpers import REPO

V1 = REPO / "tests" / "data" / "v1_ctr"

# (batch size, start record, features, shuffle seed): every FeatureConfig mode, resumes, shuffles.
CASES = [
    (64, 0, FeatureConfig(), None),
    (100, 37, FeatureConfig(id_space=1000), 5),
    (128, 0, FeatureConfig(dense_norm="log-missing", id_space=2**40 + 7), None),
    (77, 10, FeatureConfig(dense_norm="log"), 3),
    (200, 0, FeatureConfig(dense_norm="none", id_space=1), None),
]
# Computed on main at a379aec, before readers learnt schemas, by this very function.
DIGEST_BEFORE_SCHEMAS = "fa107012a3f8ca04cd75cf8572884ffb2658fda844829f32268b1ade75665781"


def v1_digest(url: str) -> str:
    ds = open_dataset(url)
    h = hashlib.sha256()
    for split in (ds, ds.split("test")):
        for batch_size, start, features, seed in CASES:
            for chunk in split.chunks:
                for b in iter_batches(split.url, chunk, batch_size, start_record=start,
                                      features=features, shuffle_seed=seed):
                    h.update(",".join(b.dense_names).encode())
                    for a in (b.label, b.dense, *(b.ids[c] for c in SPARSE_COLUMNS)):
                        h.update(str(a.dtype).encode())
                        h.update(str(a.shape).encode())
                        h.update(np.ascontiguousarray(a).tobytes())
                    assert not b.bags
                    assert b.weight is None
    return h.hexdigest()


def test_a_format_1_dataset_yields_exactly_the_batches_it_did_before() -> None:
    assert v1_digest(str(V1)) == DIGEST_BEFORE_SCHEMAS


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


def test_the_criteo_sample_converts_loads_and_yields_batches(tmp_path: Path) -> None:
    from elasticps.data.criteo_convert import convert_criteo

    sample = REPO / "tests" / "data" / "criteo_sample_100.tsv"
    out = tmp_path / "criteo"
    report = convert_criteo([str(sample)], str(out), rows_per_chunk=32, progress=False)
    assert report.rows == 100
    ds = open_dataset(str(out))
    assert ds.manifest.is_criteo_layout
    assert ds.schema == criteo_preset()
    batches = list(ds.iter_batches(16, features=FeatureConfig(dense_norm="log-missing")))
    assert sum(len(b) for b in batches) == 100
    first = batches[0]
    assert first.dense.shape == (16, 13)
    assert sorted(first.ids) == sorted(SPARSE_COLUMNS)
    # The first sample row's C1 is 05db9164 or another real value: ids as format 1 hashed them.
    from elasticps.data.features import hash_categorical

    line = sample.read_text().splitlines()[0].split("\t")
    value = np.array([[int(line[14], 16)]], dtype=np.uint32)
    want = hash_categorical(value, np.zeros((1, 1), bool), 1_000_001)[0, 0]
    assert first.ids["C1"][0] == want
