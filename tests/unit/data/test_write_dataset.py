"""write_dataset: tables in memory -> datasets that read back row for row; the hash as documented;
bad data at read time names file and column."""

from __future__ import annotations

import json
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticps.data import (
    DatasetWriter,
    FeatureConfig,
    Schema,
    iter_batches,
    open_dataset,
    write_dataset,
)
from elasticps.data.storage import arrow_schema
from elasticps.errors import DataError, MalformedInputError

M64 = 2**64 - 1


def splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def documented_id(value: int | str | None, column: str, id_space: int) -> int:
    """elasticps/data/hashing.py's docstring, in plain Python integers (not its code)."""
    if value is None:
        u = 2**32
    elif isinstance(value, str):
        u = 0xCBF29CE484222325
        for byte in value.encode("utf-8"):
            u = ((u ^ byte) * 0x100000001B3) & M64
    elif 0 <= value < 2**32:
        u = value
    else:
        u = splitmix64(value & M64)
    salt = zlib.crc32(column.encode("utf-8")) & 0x7FFFFFFF
    return splitmix64((salt << 33) ^ u) % id_space


def test_the_hash_is_the_documented_one_and_pinned() -> None:
    from elasticps.data.hashing import hash_keys, int_keys, string_keys

    ints = np.array([0, 7, 2**32 - 1, 2**32, -1, -(2**63), 2**63 - 1], dtype=np.int64)
    got = hash_keys(int_keys(ints), zlib.crc32(b"user") & 0x7FFFFFFF, 1_000_003)
    assert got.tolist() == [documented_id(int(v), "user", 1_000_003) for v in ints]
    words = ["", "a", "café", "Drama", "x" * 300]
    got = hash_keys(string_keys(pa.array(words)), zlib.crc32(b"genre") & 0x7FFFFFFF, 2**40)
    assert got.tolist() == [documented_id(w, "genre", 2**40) for w in words]
    # Pinned: a change of the hash would silently invalidate every trained embedding.
    assert documented_id("US", "country", 1_000_003) == 911625
    assert documented_id(12345, "user", 1_000_003) == 921391
    # Salted per column: equal values in two columns of a table get unrelated ids.
    assert documented_id("US", "country", 2**40) != documented_id("US", "origin", 2**40)


NO_SPACE = st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"))
WORD = st.text(alphabet=NO_SPACE, max_size=6)
MISSING = {"", "NA", "?"}


@st.composite
def tables(draw: Any) -> dict[str, list[Any]]:
    n = draw(st.integers(1, 40))
    def column(strategy: Any) -> list[Any]:
        return draw(st.lists(strategy, min_size=n, max_size=n))
    return {
        "y": column(st.integers(0, 1)),
        "w": column(st.floats(0, 10, allow_nan=False)),
        "x": column(st.none() | st.floats(-1e9, 1e9, allow_nan=False, width=64)),
        "k": column(st.none() | st.integers(-(2**63), 2**63 - 1)),
        "s": column(st.none() | WORD),
        "p": column(st.integers(0, 99)),
        "g": column(st.none() | st.lists(WORD, max_size=4)),
    }


SCHEMA = Schema.from_dict({
    "label": "y", "weight": "w",
    "columns": {
        "x": {"kind": "dense", "norm": "standard"},
        "k": {"kind": "categorical", "dtype": "int"},
        "s": {"kind": "categorical", "dtype": "string"},
        "p": {"kind": "categorical", "ids": "passthrough", "table": "t", "id_space": 100},
        "g": {"kind": "multi_categorical", "dtype": "string", "table": "t"},
    },
})


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=tables(), rows_per_chunk=st.integers(1, 16))
def test_a_written_table_reads_back_row_for_row(data: dict[str, list[Any]],
                                                rows_per_chunk: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/ds"
        report = write_dataset(data, out, SCHEMA, rows_per_chunk=rows_per_chunk)
        assert report.rows == len(data["y"])
        ds = open_dataset(out)
        batches = list(ds.iter_batches(7))
    stats = ds.schema.column("x").stats
    assert stats is not None
    present = [v for v in data["x"] if v is not None]
    assert stats.count == len(present)
    if present:
        assert stats.mean == pytest.approx(float(np.mean(present)), rel=1e-9, abs=1e-6)
    space = 1_000_003
    row = 0
    for batch in batches:
        for i in range(len(batch)):
            assert batch.label[i] == data["y"][row]
            assert batch.weight is not None
            assert batch.weight[i] == np.float32(data["w"][row])
            x = data["x"][row]
            want = 0.0 if x is None else (x - stats.mean) / (stats.std or 1.0)
            assert batch.dense[i, 0] == pytest.approx(want, rel=1e-5, abs=1e-5)
            assert batch.ids["k"][i] == documented_id(data["k"][row], "k", space)
            s = data["s"][row]
            assert batch.ids["s"][i] == documented_id(None if s in MISSING else s, "s", space)
            assert batch.ids["p"][i] == data["p"][row]
            bag = batch.bags["g"]
            got = bag.values[bag.offsets[i]:bag.offsets[i + 1]].tolist()
            words = [w for w in data["g"][row] or [] if w not in MISSING]
            assert got == [documented_id(w, "g", 100) for w in words]
            row += 1
    assert row == len(data["y"])


def test_a_dataframe_with_pandas_types_writes_and_reads(tmp_path: Path) -> None:
    frame = pd.DataFrame({
        "clicked": [1, 0, 1],
        "age": [23.0, np.nan, 40.0],
        "n": pd.array([260, None, 3], dtype="Int64"),
        "country": pd.Categorical(["US", "FR", "US"]),
        "tags": [["a", "b"], [], ["b"]],
    })
    schema = {"label": "clicked", "columns": {"age": {"kind": "dense", "norm": "minmax"},
                                              "n": "categorical", "country": "categorical",
                                              "tags": "multi_categorical"}}
    report = write_dataset(frame, str(tmp_path / "ds"), schema)
    ds = open_dataset(str(tmp_path / "ds"))
    assert report.manifest == ds.manifest
    assert ds.schema.column("n").dtype == "int"
    (batch,) = ds.iter_batches(10)
    np.testing.assert_allclose(batch.dense[:, 0], [0.0, 0.0, 1.0])
    assert batch.ids["n"][0] == documented_id(260, "n", 1_000_003)
    assert batch.ids["n"][1] == documented_id(None, "n", 1_000_003)
    np.testing.assert_array_equal(batch.bags["tags"].offsets, [0, 2, 2, 3])


def test_labels_of_every_kind(tmp_path: Path) -> None:
    def write(label: Any, values: list[Any]) -> Any:
        out = tmp_path / f"ds{len(list(tmp_path.iterdir()))}"
        write_dataset({"y": values, "x": [1.0] * len(values)}, str(out),
                      {"label": label, "columns": {"x": {"kind": "dense", "norm": "none"}}})
        return next(open_dataset(str(out)).iter_batches(10))

    multi = write({"name": "y", "kind": "multi_label", "classes": 4}, [[0, 3], [], None])
    np.testing.assert_array_equal(multi.label, [[1, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert multi.label.dtype == np.float32
    cls = write({"name": "y", "kind": "class", "classes": 5}, [4, 0, 2])
    np.testing.assert_array_equal(cls.label, [4.0, 0.0, 2.0])
    reg = write({"name": "y", "kind": "float"}, [0.5, -2.0, 1e3])
    np.testing.assert_array_equal(reg.label, np.float32([0.5, -2.0, 1e3]))
    with pytest.raises(MalformedInputError, match=r"dict:2:y: the label is 5, expected a class"):
        write({"name": "y", "kind": "class", "classes": 5}, [4, 5])
    with pytest.raises(MalformedInputError, match=r"dict:1:y: in \[0, 9\]: class 9 is outside"):
        write({"name": "y", "kind": "multi_label", "classes": 4}, [[0, 9]])


def test_bad_rows_of_a_table_name_row_and_column_and_write_nothing(tmp_path: Path) -> None:
    data = {"y": [1, 0, 1], "x": ["1", "two", "3"]}
    out = tmp_path / "ds"
    with pytest.raises(MalformedInputError, match=r"dict:2:x: 'two' is not a number"):
        write_dataset(data, str(out), {"label": "y", "columns": {"x": "dense"}})
    assert not out.exists()
    with pytest.raises(DataError, match=r"\['z'\] are not in the schema"):
        write_dataset({**data, "z": [1, 2, 3]}, str(out), {"label": "y", "columns": {
            "x": {"kind": "dense", "dtype": "float"}}})


def test_leaving_the_writers_with_block_commits_and_an_exception_removes(
        tmp_path: Path) -> None:
    schema = Schema.from_dict({"label": "y", "columns": {}})
    table = pa.table({"y": pa.array([1, 0], pa.int8())})
    with DatasetWriter(str(tmp_path / "ok"), arrow_schema(schema), schema=schema) as writer:
        writer.write(table)
    assert open_dataset(str(tmp_path / "ok")).num_rows == 2  # no close() needed
    def fail_inside() -> None:
        with DatasetWriter(str(tmp_path / "bad"), arrow_schema(schema), schema=schema,
                           rows_per_chunk=1) as writer:
            writer.write(table)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert not (tmp_path / "bad").exists()


@pytest.fixture
def small(tmp_path: Path) -> Path:
    out = tmp_path / "small"
    write_dataset({"y": [1, 0, 1, 1], "x": [1.0, 2.0, 3.0, 4.0], "c": ["a", "b", "a", "c"],
                   "p": [1, 2, 3, 4]}, str(out),
                  {"label": "y", "columns": {"x": "dense", "c": "categorical",
                                             "p": {"kind": "categorical", "ids": "passthrough",
                                                   "table": "t", "id_space": 10}}})
    return out


def _rewrite(out: Path, change: Any) -> None:
    part = out / "part-00000.parquet"
    pq.write_table(change(pq.read_table(part)), part)


def _set(name: str, values: pa.Array) -> Any:
    return lambda t: t.set_column(t.schema.get_field_index(name), name, values)


@pytest.mark.parametrize(("change", "column", "what"), [
    (lambda t: t.drop_columns(["c"]), "'c'", "not in the file"),
    (_set("x", pa.array(["1", "2", "3", "4"])), "'x'",
     "holds string; the manifest declares a number column"),
    (_set("c", pa.array([1.5] * 4)), "'c'", "holds double"),
    (_set("p", pa.array([1, 2, 10, 4])), "'p'", "holds the id 10"),
    (_set("y", pa.array([1, 2, 0, 1], pa.int8())), "'y'", "expected 0 or 1"),
    (_set("y", pa.array([1, None, 0, 1], pa.int8())), "'y'", "missing value"),
])
def test_bad_data_at_read_time_is_a_data_error_naming_file_and_column(
        small: Path, change: Any, column: str, what: str) -> None:
    _rewrite(small, change)
    chunk = open_dataset(str(small)).chunks[0]
    with pytest.raises(DataError) as info:
        list(iter_batches(str(small), chunk, 2))
    message = str(info.value)
    assert "part-00000.parquet" in message
    assert column in message
    assert what in message


def test_a_manifest_that_does_not_parse_is_a_data_error(small: Path) -> None:
    manifest = json.loads((small / "manifest.json").read_text())
    manifest["schema"]["columns"]["x"]["norm"] = "zscore"
    (small / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="column 'x': norm"):
        open_dataset(str(small))


def test_feature_config_is_for_criteo_layout_datasets_only(small: Path) -> None:
    ds = open_dataset(str(small))
    assert len(list(ds.iter_batches(2, features=FeatureConfig()))) == 2  # the default: ignored
    with pytest.raises(DataError, match="format 1"):
        list(ds.iter_batches(2, features=FeatureConfig(id_space=7)))


def test_shuffled_reads_of_any_schema_are_deterministic_and_resume(tmp_path: Path) -> None:
    n = 300
    rng = np.random.default_rng(0)
    write_dataset({"y": rng.integers(0, 2, n), "x": rng.random(n),
                   "g": [[f"v{j}" for j in range(i % 4)] for i in range(n)]},
                  str(tmp_path / "ds"), {"label": "y", "columns": {"x": "dense",
                                                                   "g": "multi_categorical"}},
                  rows_per_chunk=n)
    ds = open_dataset(str(tmp_path / "ds"))
    chunk = ds.chunks[0]

    def rows(start: int) -> list[tuple[float, float, tuple[int, ...]]]:
        out = []
        for b in iter_batches(ds.url, chunk, 32, start_record=start, shuffle_seed=9):
            bag = b.bags["g"]
            out += [(float(b.label[i]), float(b.dense[i, 0]),
                     tuple(bag.values[bag.offsets[i]:bag.offsets[i + 1]].tolist()))
                    for i in range(len(b))]
        return out

    whole = rows(0)
    assert whole == rows(0)
    assert rows(100) == whole[100:]
    plain = [(float(b.label[i]), float(b.dense[i, 0])) for b in iter_batches(ds.url, chunk, 64)
             for i in range(len(b))]
    assert sorted(plain) == sorted((a, b) for a, b, _ in whole)
    assert plain != [(a, b) for a, b, _ in whole]


def test_an_overwrite_removes_the_old_datasets_other_files(tmp_path: Path) -> None:
    from elasticps.data.text_ngram import convert_text

    text = tmp_path / "t.txt"
    text.write_text("a b c\n")
    convert_text([str(text)], str(tmp_path / "ds"))
    assert (tmp_path / "ds" / "vocab.txt").exists()
    write_dataset({"y": [1]}, str(tmp_path / "ds"), {"label": "y", "columns": {}},
                  overwrite=True)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["manifest.json",
                                                                    "part-00000.parquet"]


DIGEST = """
import hashlib, sys
import numpy as np
from elasticps.data import open_dataset, iter_batches
ds = open_dataset(sys.argv[1])
h = hashlib.sha256()
for b in iter_batches(ds.url, ds.chunks[0], 7, start_record=3, shuffle_seed=11):
    for a in (b.label, b.dense, *b.ids.values(), b.bags["g"].values, b.bags["g"].offsets):
        h.update(np.ascontiguousarray(a).tobytes())
print(h.hexdigest())
"""


@pytest.mark.slow
def test_any_schema_reads_the_same_in_another_process(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "ds"
    write_dataset({"y": [1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1], "x": np.arange(12.0),
                   "s": [f"w{i % 5}" for i in range(12)], "k": list(range(-6, 6)),
                   "g": [["a", "b"][: i % 3] for i in range(12)]}, str(out),
                  {"label": "y", "columns": {"x": "dense", "s": "categorical",
                                             "k": "categorical", "g": "multi_categorical"}})
    digests = {
        subprocess.run([sys.executable, "-c", DIGEST, str(out)], capture_output=True, text=True,
                       check=True, timeout=120,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
        for seed in ("1", "987")}
    assert len(digests) == 1


def test_labels_of_mixed_kinds_read_back_as_one_column_each(tmp_path: Path) -> None:
    """A multi-task dataset: a binary, a float and a class label side by side in
    ``Batch.label`` [B, 3], in schema order; each checked by its kind."""
    schema = {"labels": ["click", {"name": "dwell", "kind": "float"},
                         {"name": "topic", "kind": "class", "classes": 3}],
              "columns": {"x": "dense"}}
    table = {"click": [1, 0, 1], "dwell": [0.5, 2.0, -1.25], "topic": [2, 0, 1],
             "x": [1.0, 2.0, 3.0]}
    write_dataset(table, str(tmp_path / "d"), schema)
    dataset = open_dataset(str(tmp_path / "d"))
    assert dataset.schema.label_kind == "mixed"
    batch = next(iter(dataset.iter_batches(10)))
    np.testing.assert_array_equal(batch.label, [[1, 0.5, 2], [0, 2.0, 0], [1, -1.25, 1]])
    with pytest.raises(MalformedInputError, match="topic"):
        write_dataset({**table, "topic": [2, 3, 1]}, str(tmp_path / "bad"), schema)
