"""elasticps data convert csv|tsv|parquet|jsonl: users' files as they are, real files, no mocks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elasticps.data import DenseStats, Schema, open_dataset
from elasticps.data.bad_rows import BadRows
from elasticps.data.convert import WriteOptions, check_columns, convert
from elasticps.data.hashing import hash_keys, int_keys
from elasticps.data.schema import default_salt
from elasticps.data.source_parquet import ParquetSource
from elasticps.data.source_text import TextSource
from elasticps.errors import DataError, MalformedInputError
from tests.helpers import CliResult, run_cli

SCHEMA = """
label: clicked
missing: ["", "NA", "?"]
columns:
  age: dense
  visits: {kind: dense, dtype: int, norm: log}
  country: categorical
  user: {kind: categorical, dtype: int, table: users, dim: 4, id_space: 1000}
  genres: {kind: multi_categorical, sep: "|"}
  item: {kind: categorical, ids: passthrough, table: items, id_space: 50}
"""
HEADER = "clicked,age,visits,country,user,genres,item"
# Every oddity users' files have: integral floats in int columns, spaces, quotes, missing
# tokens (empty, NA, ?), several separators' worth of multi-values, a blank line.
ROWS = [
    '1,23.5,260.0,US,7,Drama|War,3',
    '0, 31 ,"12", "FR" ,8.0,,0',
    '1.0,NA,?,DE,7, Comedy | Drama ,49',
    '',
    '0,,0,"US",9,"War|",12',
]
EXPECTED = {
    "clicked": [1, 0, 1, 0],
    "age": [23.5, 31.0, None, None],
    "visits": [260, 12, None, 0],
    "country": ["US", "FR", "DE", "US"],
    "user": [7, 8, 7, 9],
    "genres": [["Drama", "War"], None, ["Comedy", "Drama"], ["War"]],
    "item": [3, 0, 49, 12],
}


def convert_cli(*args: str) -> CliResult:
    quiet = () if "--infer" in args else ("--no-progress",)
    return run_cli("data", "convert", *args, *quiet)


def stored(out: Path) -> dict[str, list[object]]:
    table = pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("part-*.parquet")))
    return table.to_pydict()


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.yaml"
    path.write_text(SCHEMA)
    return path


def write_csv(path: Path, rows: list[str], sep: str = ",", header: bool = True) -> Path:
    lines = ([HEADER] if header else []) + rows
    path.write_text("\n".join(line.replace(",", sep) if sep != "," else line
                              for line in lines) + "\n")
    return path


@pytest.mark.parametrize("sep", [",", "\t"])
def test_csv_and_tsv_with_every_oddity_convert_and_read(
        tmp_path: Path, schema_file: Path, sep: str) -> None:
    kind = "csv" if sep == "," else "tsv"
    rows = ROWS if sep == "," else [r.replace('"War|"', "War|") for r in ROWS]
    src = write_csv(tmp_path / f"data.{kind}", rows, sep)
    out = tmp_path / "ds"
    done = convert_cli(kind, str(src), "--schema", str(schema_file), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "wrote 4 rows" in done.stdout
    assert "1 blank line" in done.stdout
    assert stored(out) == EXPECTED
    ds = open_dataset(str(out))
    schema = ds.schema
    assert schema.column("country").dtype == "string"
    assert schema.column("age").dtype == "float"
    stats = schema.column("age").stats
    assert stats is not None
    assert (stats.count, stats.mean, stats.min, stats.max) == (2, 27.25, 23.5, 31.0)
    assert math.isclose(stats.std, 3.75)
    assert schema.column("country").salt == default_salt("country")  # pinned in the manifest
    (batch,) = ds.iter_batches(10)
    np.testing.assert_array_equal(batch.label, [1, 0, 1, 0])
    np.testing.assert_allclose(batch.dense[:, 0], [-1.0, 1.0, 0.0, 0.0])  # standard; missing 0
    np.testing.assert_allclose(batch.dense[:, 1], np.log1p([260, 12, 0, 0]), rtol=1e-6)
    np.testing.assert_array_equal(batch.ids["item"], [3, 0, 49, 12])  # passthrough
    user = hash_keys(int_keys(np.array([7, 8, 7, 9])), default_salt("user"), 1000)
    np.testing.assert_array_equal(batch.ids["user"], user)
    assert batch.ids["country"][0] == batch.ids["country"][3] != batch.ids["country"][1]
    np.testing.assert_array_equal(batch.bags["genres"].offsets, [0, 2, 2, 4, 5])
    values = batch.bags["genres"].values
    # Drama, War | - | Comedy, Drama | War
    assert values[0] == values[3] != values[1] == values[4] != values[2]


def test_no_header_means_the_schemas_order(tmp_path: Path, schema_file: Path) -> None:
    src = write_csv(tmp_path / "data.csv", ROWS, header=False)
    out = tmp_path / "ds"
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out", str(out),
                       "--no-header")
    assert done.returncode == 0, done.stderr
    assert stored(out) == EXPECTED


def test_jsonl_with_mixed_types_lists_and_blank_lines(tmp_path: Path,
                                                      schema_file: Path) -> None:
    rows = [
        {"clicked": 1, "age": 23.5, "visits": 260.0, "country": "US", "user": 7,
         "genres": ["Drama", "War"], "item": 3},
        {"clicked": 0, "age": " 31 ", "visits": "12", "country": " FR ", "user": "8.0",
         "genres": None, "item": 0},
        {"clicked": 1.0, "age": "NA", "country": "DE", "user": 7,
         "genres": ["Comedy", " Drama "], "item": 49},  # no "visits": missing
        {"clicked": 0, "age": None, "visits": 0, "country": "US", "user": 9, "genres": ["War"],
         "item": 12},
    ]
    lines = [json.dumps(rows[0]), json.dumps(rows[1]), json.dumps(rows[2]), "  ",
             json.dumps(rows[3])]
    src = tmp_path / "data.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ds"
    done = convert_cli("jsonl", str(src), "--schema", str(schema_file), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stored(out) == EXPECTED


def test_parquet_with_typed_and_list_columns(tmp_path: Path, schema_file: Path) -> None:
    table = pa.table({
        "clicked": pa.array([1, 0, 1, 0], pa.int64()),
        "age": pa.array([23.5, 31.0, None, float("nan")]),
        "visits": pa.array([260.0, 12.0, None, 0.0]),  # integral floats, as pandas writes
        "country": pa.array(["US", "FR", "DE", "US"]).dictionary_encode(),
        "user": pa.array([7, 8, 7, 9], pa.int32()),
        "genres": pa.array([["Drama", "War"], None, ["Comedy", "Drama"], ["War", None]]),
        "item": pa.array([3, 0, 49, 12], pa.uint8()),
    })
    src = tmp_path / "data.parquet"
    pq.write_table(table, src)
    out = tmp_path / "ds"
    done = convert_cli("parquet", str(src), "--schema", str(schema_file), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert stored(out) == EXPECTED


# Each malformed class, and where it must be reported (line, column).
MALFORMED = [
    ("1,2.5,7.5,US,7,a,3", "visits", "'7.5' is not an integer"),
    ("1,abc,1,US,7,a,3", "age", "'abc' is not a number"),
    ("2,1,1,US,7,a,3", "clicked", "the label is 2, expected 0 or 1"),
    (",1,1,US,7,a,3", "clicked", "the label is missing"),
    ("1,1,1,US,7.25,a,3", "user", "'7.25' is not an integer"),
    ("1,1,1,US,7,a,50", "item", "id 50 is outside its table's [0, 50)"),
    ("1,1,1,US,7,a,", "item", "the id is missing"),
    ("1,inf,1,US,7,a,3", "age", "'inf' is not a finite number"),
    ("1,1,1,US,7,a", None, "expected 7 fields, found 6"),
]


@pytest.mark.parametrize(("row", "column", "reason"), MALFORMED)
def test_each_malformed_class_is_reported_as_file_line_column_and_nothing_is_written(
        tmp_path: Path, schema_file: Path, row: str, column: str | None, reason: str) -> None:
    src = write_csv(tmp_path / "data.csv", [ROWS[0], ROWS[1], row, ROWS[2]])
    out = tmp_path / "ds"
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out", str(out))
    assert done.returncode == 1
    where = f"{src}:4:{column}:" if column else f"{src}:4:"
    assert f"{where} {reason}" in done.stderr, done.stderr
    assert not out.exists()  # no manifest, no data files, no directory
    # Within --max-bad-rows the row is skipped and the rest converts.
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out", str(out),
                       "--max-bad-rows", "1")
    assert done.returncode == 0, done.stderr
    assert "1 malformed row" in done.stdout
    source = open_dataset(str(out)).manifest.source
    assert source["first_bad_lines"] == [f"{where} {reason}"]
    assert stored(out)["clicked"] == [1, 0, 1]


def test_a_failed_conversion_into_an_existing_empty_directory_leaves_it_empty(
        tmp_path: Path, schema_file: Path) -> None:
    src = write_csv(tmp_path / "data.csv", [ROWS[0]] * 100 + [MALFORMED[0][0]])
    out = tmp_path / "ds"
    out.mkdir()
    schema = Schema.from_yaml(SCHEMA)
    bad = BadRows(0)
    sources = [TextSource(str(src), delimiter=",", header=True, order=(), bad=bad)]
    with pytest.raises(MalformedInputError, match=r":102:visits: '7\.5' is not an integer"):
        convert(sources, schema, str(out), options=WriteOptions(rows_per_chunk=10), bad=bad)
    assert list(out.iterdir()) == []


def test_columns_missing_from_the_file_or_the_schema_are_named(
        tmp_path: Path, schema_file: Path) -> None:
    src = tmp_path / "data.csv"
    src.write_text(HEADER.replace(",item", ",other") + "\n" + ROWS[0] + "\n")
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "a"))
    assert done.returncode == 1
    assert "column(s) ['item'] are not in the input" in done.stderr
    src.write_text(HEADER + ",note\n" + ROWS[0] + ",hello\n")
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "b"))
    assert done.returncode == 1
    assert "column(s) ['note'] are not in the schema" in done.stderr
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "b"), "--ignore-extra")
    assert done.returncode == 0, done.stderr
    assert "note" not in stored(tmp_path / "b")


def test_infer_guesses_a_schema_that_converts_the_csv(tmp_path: Path) -> None:
    src = write_csv(tmp_path / "data.csv", ROWS)
    guessed = convert_cli("csv", str(src), "--infer")
    assert guessed.returncode == 0, guessed.stderr
    schema = Schema.from_yaml(guessed.stdout)
    assert schema.labels[0].name == "clicked"
    assert schema.label_kind == "binary"
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds == {"age": "dense", "visits": "dense", "country": "categorical",
                     "user": "dense", "genres": "multi_categorical", "item": "dense"}
    assert schema.column("genres").sep == "|"
    assert not (tmp_path / "ds").exists()
    path = tmp_path / "guess.yaml"
    path.write_text(guessed.stdout)
    done = convert_cli("csv", str(src), "--schema", str(path), "--out", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert open_dataset(str(tmp_path / "ds")).num_rows == 4


def test_infer_takes_integers_named_like_ids_as_categorical(tmp_path: Path) -> None:
    src = tmp_path / "ids.csv"
    src.write_text("clicked,user_id,itemId,id,paid,valid,age\n"
                   "1,17,3,100,5,1,30\n0,2,3,101,7,0,41.0\n1,17,9,102,,1,\n")
    guessed = convert_cli("csv", str(src), "--infer")
    assert guessed.returncode == 0, guessed.stderr
    schema = Schema.from_yaml(guessed.stdout)
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds == {"user_id": "categorical", "itemId": "categorical", "id": "categorical",
                     "paid": "dense", "valid": "dense", "age": "dense"}
    assert "integers named like an id, 2 distinct" in guessed.stdout
    path = tmp_path / "guess.yaml"
    path.write_text(guessed.stdout)
    done = convert_cli("csv", str(src), "--schema", str(path), "--out", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert open_dataset(str(tmp_path / "ds")).schema.column("user_id").dtype == "int"


def test_like_converts_a_test_split_with_the_training_sets_dtypes_and_stats(
        tmp_path: Path, schema_file: Path) -> None:
    train = write_csv(tmp_path / "train.csv", ROWS)
    test = write_csv(tmp_path / "test.csv", ['1,100,1,US,7,x,3'])
    assert convert_cli("csv", str(train), "--schema", str(schema_file), "--out",
                       str(tmp_path / "train")).returncode == 0
    done = convert_cli("csv", str(test), "--schema", str(schema_file), "--out",
                       str(tmp_path / "test"), "--like", str(tmp_path / "train"))
    assert done.returncode == 0, done.stderr
    a, b = open_dataset(str(tmp_path / "train")).schema, open_dataset(str(tmp_path / "test")).schema
    assert b.column("age").stats == a.column("age").stats
    assert b.column("genres").dtype == a.column("genres").dtype == "string"
    (batch,) = open_dataset(str(tmp_path / "test")).iter_batches(5)
    assert batch.dense[0, 0] == pytest.approx((100 - 27.25) / 3.75)


def test_criteo_text_with_integral_floats_and_spaces_converts(tmp_path: Path) -> None:
    from elasticps.data.criteo_convert import convert_criteo

    line = ["1", "260.0", " 3 ", "+4", *[""] * 10, " 05DB9164 ", *[""] * 25]
    bad = ["0", "2.5", *[""] * 12, *[""] * 26]
    src = tmp_path / "c.tsv"
    src.write_text("\t".join(line) + "\n" + "\t".join(bad) + "\n")
    report = convert_criteo([str(src)], str(tmp_path / "ds"), max_bad_rows=1, progress=False)
    assert report.rows == 1
    assert report.bad_lines == [f"{src}:2:I1: '2.5' is not an integer"]
    table = pq.read_table(tmp_path / "ds" / "part-00000.parquet")
    assert table.column("I1").to_pylist() == [260]
    assert table.column("I2").to_pylist() == [3]
    assert table.column("I3").to_pylist() == [4]
    assert table.column("C1").to_pylist() == [0x05DB9164]


def test_unreadable_inputs_are_data_errors(tmp_path: Path, schema_file: Path) -> None:
    src = tmp_path / "data.parquet"
    src.write_bytes(b"not parquet at all")
    done = convert_cli("parquet", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "ds"))
    assert done.returncode == 1
    assert "cannot read as Parquet" in done.stderr
    pq.write_table(pa.table({"clicked": [1]}), src)
    with pytest.raises(DataError, match="not in the input"):
        check_columns(ParquetSource(str(src)), Schema.from_yaml(SCHEMA), False)


def test_a_jsonl_line_that_is_not_an_object_is_a_malformed_row(tmp_path: Path,
                                                                schema_file: Path) -> None:
    good = {"clicked": 1, "age": 1, "visits": 1, "country": "US", "user": 7, "genres": "a",
            "item": 3}
    src = tmp_path / "data.jsonl"
    src.write_text(json.dumps(good) + "\n{broken\n[1, 2]\n" + json.dumps(good) + "\n")
    done = convert_cli("jsonl", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "ds"))
    assert done.returncode == 1
    assert f"{src}:2: not JSON" in done.stderr
    assert not (tmp_path / "ds").exists()
    done = convert_cli("jsonl", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "ds"), "--max-bad-rows", "2")
    assert done.returncode == 0, done.stderr
    assert open_dataset(str(tmp_path / "ds")).manifest.source["first_bad_lines"] == [
        f"{src}:2: not JSON: Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1)", f"{src}:3: a list, not a JSON object"]


def test_missing_tokens_can_be_set_per_column(tmp_path: Path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text("label: y\nmissing: ['']\ncolumns:\n"
                      "  a: {kind: categorical, missing: ['-1', 'none']}\n  b: categorical\n")
    src = tmp_path / "d.csv"
    src.write_text("y,a,b\n1,-1,-1\n0,none,NA\n1,x,\n")
    done = convert_cli("csv", str(src), "--schema", str(schema), "--out", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert stored(tmp_path / "ds")["a"] == [None, None, "x"]
    assert stored(tmp_path / "ds")["b"] == ["-1", "NA", None]


def test_a_file_with_only_a_header_makes_an_empty_dataset(tmp_path: Path,
                                                           schema_file: Path) -> None:
    src = write_csv(tmp_path / "data.csv", [])
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out",
                       str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    ds = open_dataset(str(tmp_path / "ds"))
    assert (ds.num_rows, ds.chunks, ds.schema.column("country").dtype) == (0, (), "string")


HEX_SCHEMA = """
label: y
columns:
  count: {kind: dense, dtype: int32, norm: none}
  ad: {kind: categorical, dtype: hex32, table: ads, id_space: 1000}
  tags: {kind: multi_categorical, dtype: hex32, sep: "|", table: ads}
  slot: {kind: categorical, dtype: int32, ids: passthrough, table: slots, id_space: 10}
"""


def test_int32_and_hex32_columns_convert_store_and_hash_as_their_integers(
        tmp_path: Path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text(HEX_SCHEMA)
    src = tmp_path / "d.csv"
    src.write_text("y,count,ad,tags,slot\n"
                   "1,-2147483648,05db9164,68fd1e64|FFFFFFFF,3\n"
                   "0,2147483647, 0000000A ,,9\n"
                   "1,,NA,00000000,0\n"
                   "0,2147483648,05db9164,,1\n"      # outside int32
                   "1,1,5db9164,,1\n"               # 7 digits
                   "0,1,0x5db9164,,1\n"             # not hex digits
                   "1,1,05db9164,68fd1e64|zz,1\n"    # a bad element
                   "0,1,05db9164,,12\n")            # a passthrough id outside its table
    out = tmp_path / "ds"
    done = convert_cli("csv", str(src), "--schema", str(schema), "--out", str(out),
                       "--max-bad-rows", "5")
    assert done.returncode == 0, done.stderr
    assert open_dataset(str(out)).manifest.source["first_bad_lines"] == [
        f"{src}:5:count: 2147483648 is outside the int32 range",
        f"{src}:6:ad: '5db9164' is not 8 hex digits",
        f"{src}:7:ad: '0x5db9164' is not 8 hex digits",
        f"{src}:8:tags: in '68fd1e64|zz': 'zz' is not 8 hex digits",
        f"{src}:9:slot: id 12 is outside its table's [0, 10)"]
    types = pq.read_schema(out / "part-00000.parquet")
    assert (types.field("count").type, types.field("ad").type, types.field("tags").type,
            types.field("slot").type) == (pa.int32(), pa.uint32(), pa.list_(pa.uint32()),
                                          pa.int32())
    assert stored(out) == {"y": [1, 0, 1], "count": [-2**31, 2**31 - 1, None],
                           "ad": [0x05DB9164, 10, None],
                           "tags": [[0x68FD1E64, 0xFFFFFFFF], None, [0]], "slot": [3, 9, 0]}
    ds = open_dataset(str(out))
    assert ds.schema.column("ad").dtype == "hex32"
    (batch,) = ds.iter_batches(10)
    np.testing.assert_array_equal(batch.dense[:, 0],
                                  np.array([-2**31, 2**31 - 1, 0], dtype=np.float32))
    salt = default_salt("ad")
    want = hash_keys(int_keys(np.array([0x05DB9164, 10], dtype=np.int64)), salt, 1000)
    np.testing.assert_array_equal(batch.ids["ad"][:2], want)  # the hash of the integer
    np.testing.assert_array_equal(batch.ids["slot"], [3, 9, 0])


def test_hex32_takes_a_typed_sources_integers_in_32_bits(tmp_path: Path) -> None:
    from elasticps.data import write_dataset

    schema = {"label": "y", "columns": {"ad": {"kind": "categorical", "dtype": "hex32"}}}
    report = write_dataset({"y": [1, 0, 1], "ad": np.array([5, 2**32, 0], dtype=np.int64)},
                           str(tmp_path / "ds"), schema, max_bad_rows=1)
    assert report.bad_lines == ["dict:2:ad: 4294967296 is outside [0, 2**32)"]
    assert stored(tmp_path / "ds")["ad"] == [5, 0]


def test_statistics_a_schema_declares_are_kept_the_others_measured(tmp_path: Path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text("label: y\ncolumns:\n"
                      "  a: {kind: dense, norm: minmax, stats: {min: 0, max: 100}}\n"
                      "  b: {kind: dense, norm: minmax}\n")
    src = tmp_path / "d.csv"
    src.write_text("y,a,b\n1,10,10\n0,30,30\n")
    done = convert_cli("csv", str(src), "--schema", str(schema), "--out", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    ds = open_dataset(str(tmp_path / "ds"))
    assert ds.schema.column("a").stats == DenseStats(min=0.0, max=100.0)
    assert ds.schema.column("b").stats == DenseStats(count=2, mean=20.0, std=10.0, min=10.0,
                                                     max=30.0)
    (batch,) = ds.iter_batches(2)
    np.testing.assert_allclose(batch.dense, [[0.1, 0.0], [0.3, 1.0]], rtol=1e-6)


def test_a_field_that_is_not_utf8_is_a_malformed_row_not_a_failed_file(
        tmp_path: Path, schema_file: Path) -> None:
    src = tmp_path / "data.csv"
    src.write_bytes((HEADER + "\n" + ROWS[0] + "\n").encode()
                    + b"0,31,12,F\xe9R,8,,0\n" + (ROWS[2] + "\n").encode())
    out = tmp_path / "ds"
    done = convert_cli("csv", str(src), "--schema", str(schema_file), "--out", str(out),
                       "--max-bad-rows", "1")
    assert done.returncode == 0, done.stderr
    assert open_dataset(str(out)).manifest.source["first_bad_lines"] == [
        f"{src}:3:country: 'F\\\\xe9R' is not UTF-8 text"]
    assert stored(out)["country"] == ["US", "DE"]
