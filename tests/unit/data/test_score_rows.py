"""Raw rows to score (JSON objects) read as the dataset reads the same rows after ``elasticps
data convert jsonl``: every column kind hashed and normalised by the one set of rules, and a bad
row refused naming row and column."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from elasticps.data import Batch, open_dataset
from elasticps.data.schema import Schema
from elasticps.data.score_rows import rows_batch
from elasticps.errors import InvalidArgumentError
from tests.helpers import run_cli

SCHEMA = {
    "label": "clicked",
    "weight": "w",
    "columns": {
        "age": {"kind": "dense", "norm": "standard"},
        "income": {"kind": "dense", "norm": "log"},
        "score": {"kind": "dense", "norm": "minmax"},
        "country": {"kind": "categorical"},
        "user": {"kind": "categorical", "dtype": "int"},
        "item": {"kind": "categorical", "ids": "passthrough", "table": "items",
                 "id_space": 50},
        "genres": {"kind": "multi_categorical", "sep": "|"},
        "review": {"kind": "text", "table": "words", "dim": 4, "id_space": 1000},
        "emb": {"kind": "dense_vector", "length": 2},
    },
}


def raw_rows(n: int) -> list[dict[str, Any]]:
    """Rows as a client would send them, missing values and all."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        rows.append({
            "clicked": int(rng.integers(0, 2)), "w": 1.0,
            "age": None if i % 5 == 0 else float(rng.integers(18, 80)),
            "income": "NA" if i % 7 == 0 else float(rng.uniform(1e3, 1e5)),
            "score": float(rng.normal()),
            "country": None if i % 6 == 0 else f"country-{int(rng.integers(0, 9))}",
            "user": int(rng.integers(0, 10_000_000_000)),
            "item": int(rng.integers(0, 50)),
            "genres": "|".join(["War", "Drama", "Comedy"][: i % 4]),
            "review": ["Great phone, GREAT price!", "", None, "naïve café"][i % 4],
            "emb": [float(rng.normal()), float(rng.normal())],
        })
    return rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Schema, Batch, list[dict]]:
    rows = raw_rows(40)
    root = tmp_path_factory.mktemp("rows")
    (root / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (root / "schema.yaml").write_text(json.dumps(SCHEMA))  # JSON is YAML
    done = run_cli("data", "convert", "jsonl", str(root / "rows.jsonl"), "--schema",
                   str(root / "schema.yaml"), "--out", str(root / "ds"), "--no-progress")
    assert done.returncode == 0, done.stderr
    data = open_dataset(str(root / "ds"))
    return data.schema, next(data.iter_batches(len(rows))), rows


def test_rows_read_exactly_as_the_dataset_reads_them(dataset: tuple) -> None:
    schema, stored, rows = dataset
    served = rows_batch([{k: v for k, v in row.items() if k not in ("clicked", "w")}
                         for row in rows], schema)
    assert served.dense_names == stored.dense_names == ("age", "income", "score")
    np.testing.assert_array_equal(served.dense, stored.dense)
    assert sorted(served.ids) == sorted(stored.ids) == ["country", "item", "user"]
    for name in stored.ids:
        np.testing.assert_array_equal(served.ids[name], stored.ids[name])
    for name in ("genres", "review"):
        np.testing.assert_array_equal(served.bags[name].values, stored.bags[name].values)
        np.testing.assert_array_equal(served.bags[name].offsets, stored.bags[name].offsets)
    np.testing.assert_array_equal(served.vectors["emb"], stored.vectors["emb"])
    assert served.weight is None
    assert served.label.shape == (len(rows),)


def test_the_label_and_weight_a_row_carries_are_ignored(dataset: tuple) -> None:
    schema, stored, rows = dataset
    with_label = rows_batch(rows[:3], schema)
    np.testing.assert_array_equal(with_label.dense, stored.dense[:3])
    np.testing.assert_array_equal(with_label.label, np.zeros(3, np.float32))


def test_a_missing_key_is_a_missing_value(dataset: tuple) -> None:
    schema, stored, rows = dataset
    row = {k: v for k, v in rows[0].items() if k not in ("age", "country")}
    assert rows[0]["age"] is None
    assert rows[0]["country"] is None
    batch = rows_batch([row], schema)
    np.testing.assert_array_equal(batch.dense, stored.dense[:1])
    assert batch.ids["country"][0] == stored.ids["country"][0]


@pytest.mark.parametrize(("rows", "message"), [
    ([], "rows is empty"),
    ([{"age": 30}, [1, 2]], "row 1 is a list, not an object"),
    ([{"age": 30, "agee": 31}], "row 0: column 'agee' is not one the model reads"),
    ([{"age": "thirty"}], "row 0: column 'age': 'thirty' is not a number"),
    ([{"item": 3}, {"item": 50}], "row 1: column 'item': id 50 is outside"),
    ([{"item": 3}, {"age": 1}], "row 1: column 'item': the id is missing"),
    ([{"item": 3, "emb": [1.0, 2.0, 3.0]}], "row 0: column 'emb': .* 3 values"),
    ([{"age": {"nested": 1}}], "row 0: column 'age'"),
])
def test_a_bad_row_is_refused_naming_row_and_column(dataset: tuple, rows: list,
                                                    message: str) -> None:
    schema, _, _ = dataset
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        rows_batch(rows, schema)
