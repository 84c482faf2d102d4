"""The column kinds text, dense_vector and ignore: real files converted, stored and read back."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elasticps.data import Schema, open_dataset, write_dataset
from elasticps.data.hashing import hash_keys, string_keys
from elasticps.data.schema import default_salt
from elasticps.data.tokenize import words
from elasticps.errors import ConfigError, DataError, MalformedInputError
from tests.helpers import CliResult, run_cli

SCHEMA = """
label: y
columns:
  review: {kind: text, table: words, dim: 4, id_space: 1000}
  emb: {kind: dense_vector, length: 3}
  price: dense
  row_id: ignore
"""


def convert_cli(*args: str) -> CliResult:
    return run_cli("data", "convert", *args, "--no-progress")


def python_words(text: str) -> list[str]:
    """The tokenizer as its docstring tells a scorer to write it in plain Python."""
    return re.findall(r"[^\W]+", "".join(c.lower() for c in text))


def word_ids(text: str, column: str = "review", id_space: int = 1000) -> list[int]:
    found = python_words(text)
    if not found:
        return []
    return hash_keys(string_keys(pa.array(found)), default_salt(column), id_space).tolist()


def bags(batch: object, column: str) -> list[list[int]]:
    bag = batch.bags[column]  # type: ignore[attr-defined]
    return [bag.values[bag.offsets[i]:bag.offsets[i + 1]].tolist()
            for i in range(bag.offsets.size - 1)]


def test_a_csv_with_text_vectors_and_an_ignored_column_converts_and_reads(
        tmp_path: Path) -> None:
    src = tmp_path / "reviews.csv"
    src.write_text(
        "y,review,emb,price,row_id\n"
        '1,"Great phone, GREAT price!","[0.5, -1, 2e-1]",10,0\n'
        '0,"  ","0.25 0.5 0.75",12.5,1\n'
        '1,NA,,NA,2\n'
        '0,"naïve café_au-lait; 12ème Straße",[1;2;3],3,3\n')  # ';' is not a vector separator
    (tmp_path / "s.yaml").write_text(SCHEMA)
    done = convert_cli("csv", str(src), "--schema", str(tmp_path / "s.yaml"), "--out",
                       str(tmp_path / "ds"), "--max-bad-rows", "1")
    assert done.returncode == 0, done.stderr
    assert "reviews.csv:5:emb: in '[1;2;3]': value 0: '1;2;3' is not a number" in done.stderr
    ds = open_dataset(str(tmp_path / "ds"))
    stored = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "ds").glob("*.parquet")))
    assert stored.column_names == ["y", "review", "emb", "price"]  # row_id: not stored
    assert stored.schema.field("emb").type == pa.list_(pa.float32(), 3)
    assert stored.column("review").to_pylist() == ["Great phone, GREAT price!", None, None]
    assert ds.schema.ignored == ("row_id",)
    assert ds.schema.to_dict()["columns"]["row_id"] == {"kind": "ignore"}
    batch = next(ds.iter_batches(10))
    assert bags(batch, "review") == [word_ids("Great phone, GREAT price!"), [], []]
    assert python_words("Great phone, GREAT price!") == ["great", "phone", "great", "price"]
    np.testing.assert_array_equal(batch.vectors["emb"], np.array(
        [[0.5, -1, 0.2], [0.25, 0.5, 0.75], [0, 0, 0]], np.float32))
    assert batch.dense_names == ("price",)
    tensors = batch.to_torch()
    assert tuple(tensors.vectors["emb"].shape) == (3, 3)
    assert tuple(batch.slice(1, 3).vectors["emb"].shape) == (2, 3)


def test_the_tokenizer_agrees_with_its_plain_python_description() -> None:
    texts = ["Hello, World! café_au-lait 12ème", "", "  ", "ÀÉÎ Straße", "日本語 テキスト",
             "a--b__c 3.14 x2", "ΣΑΣ ﬁne"]  # per character: no final sigma
    found, rows = words(pa.array(texts))
    got: list[list[str]] = [[] for _ in texts]
    for word, row in zip(found.to_pylist(), rows.tolist(), strict=True):
        got[row].append(word)
    assert got == [python_words(text) for text in texts]


def test_a_parquet_list_of_doubles_is_a_vector_and_a_wrong_length_is_a_malformed_row(
        tmp_path: Path) -> None:
    table = pa.table({"y": [1, 0, 1, 0],
                      "emb": pa.array([[0.1, 0.2, 0.3], [1.0, 2.0], None, [4.0, 5.0, 6.0]],
                                      pa.list_(pa.float64()))})
    schema = {"label": "y", "columns": {"emb": {"kind": "dense_vector", "length": 3}}}
    with pytest.raises(MalformedInputError, match=r"emb: \[1.0, 2.0\] has 2 values; the "
                       r"vector's length is 3"):
        write_dataset(table, str(tmp_path / "bad"), schema)
    assert not (tmp_path / "bad").exists()
    pq.write_table(table, tmp_path / "in.parquet")
    (tmp_path / "s.yaml").write_text("label: y\ncolumns:\n  emb: {kind: dense_vector, "
                                     "length: 3}\n")
    done = convert_cli("parquet", str(tmp_path / "in.parquet"), "--schema",
                       str(tmp_path / "s.yaml"), "--out", str(tmp_path / "ds"),
                       "--max-bad-rows", "1")
    assert done.returncode == 0, done.stderr
    assert "in.parquet:2:emb: [1.0, 2.0] has 2 values; the vector's length is 3" in done.stderr
    batch = next(open_dataset(str(tmp_path / "ds")).iter_batches(10))
    np.testing.assert_allclose(batch.vectors["emb"],
                               [[0.1, 0.2, 0.3], [0, 0, 0], [4, 5, 6]], rtol=1e-7)
    assert batch.vectors["emb"].dtype == np.float32


def test_a_vector_of_another_length_than_the_like_dataset_is_refused(tmp_path: Path) -> None:
    table = pa.table({"y": [1, 0], "emb": [[1.0, 2.0], [3.0, 4.0]]})
    write_dataset(table, str(tmp_path / "train"),
                  {"label": "y", "columns": {"emb": {"kind": "dense_vector", "length": 2}}})
    with pytest.raises(DataError, match="length 2 there, 3 here"):
        write_dataset(pa.table({"y": [1], "emb": [[1.0, 2.0, 3.0]]}), str(tmp_path / "test"),
                      {"label": "y", "columns": {"emb": {"kind": "dense_vector", "length": 3}}},
                      like=str(tmp_path / "train"))


@pytest.mark.parametrize(("columns", "match"), [
    ({"emb": "dense_vector"}, "column 'emb': kind dense_vector needs 'length'"),
    ({"emb": {"kind": "dense_vector", "length": 0}}, r"length must be an integer \[1, "),
    ({"emb": {"kind": "dense_vector", "length": 3, "norm": "standard"}},
     "reach the model as stored"),
    ({"emb": {"kind": "dense_vector", "length": 3, "dim": 3}},
     "'dim' applies to categorical columns only, not to a dense_vector column"),
    ({"t": {"kind": "text", "ids": "passthrough"}}, "hashed"),
    ({"t": {"kind": "text", "dtype": "int"}}, "text column has dtype string"),
    ({"t": {"kind": "text", "sep": " "}}, "'sep' applies to multi_categorical columns only"),
    ({"t": {"kind": "text", "tokenizer": "bpe"}}, "tokenizer is 'bpe'"),
    ({"x": {"kind": "ignore", "dim": 3}}, r"column 'x' \(ignore\): unknown key"),
    ({"x": {"kind": "categorical", "length": 3}}, "'length' applies to dense_vector"),
])
def test_bad_declarations_of_the_new_kinds_name_the_column(columns: dict[str, object],
                                                           match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Schema.from_dict({"label": "y", "columns": columns})


def test_the_defaults_ids_do_not_apply_to_text() -> None:
    schema = Schema.from_dict({"label": "y", "defaults": {"ids": "passthrough"},
                               "columns": {"t": "text", "c": {"kind": "categorical"}}})
    assert (schema.column("t").ids, schema.column("c").ids) == ("hash", "passthrough")


def test_the_normalised_form_of_the_new_kinds_reads_back_the_same() -> None:
    schema = Schema.from_yaml(SCHEMA)
    again = Schema.from_dict(schema.to_dict())
    assert again == schema
    assert again.to_dict()["columns"]["review"]["tokenizer"] == "words"
    assert [c.name for c in again.categorical_columns] == ["review"]
    assert [c.name for c in again.vector_columns] == ["emb"]
    assert again.source_columns() == ("y", "review", "emb", "price")
