"""``convert --infer`` on real tables of the kinds users bring: each guess, its comment, and the
guessed schema converting the very file it was guessed from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from elasticps.data import Schema, open_dataset
from tests.helpers import run_cli

ROWS = 300
WORDS = ["battery", "screen", "price", "great", "awful", "slow", "fast", "cheap", "solid",
         "broken", "love", "hate", "return", "shipping", "quality", "sound", "camera"]


def infer(path: Path, kind: str) -> tuple[Schema, str]:
    done = run_cli("data", "convert", kind, str(path), "--infer")
    assert done.returncode == 0, done.stderr
    return Schema.from_yaml(done.stdout), done.stdout


def comment(yaml_text: str, column: str) -> str:
    line = next(line for line in yaml_text.splitlines() if line.strip().startswith(column + ":"))
    return line.split("#", 1)[1].strip()


def converts(path: Path, kind: str, yaml_text: str, tmp_path: Path) -> Path:
    """The guess, unedited, converts the file it came from."""
    (tmp_path / "guess.yaml").write_text(yaml_text)
    out = tmp_path / "ds"
    done = run_cli("data", "convert", kind, str(path), "--schema", str(tmp_path / "guess.yaml"),
                   "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    return out


def shop_frame(rng: np.random.Generator) -> pd.DataFrame:
    """A table with a review, an order id per row, a user id, a genre list and a price."""
    review = [" ".join(rng.choice(WORDS, rng.integers(3, 12))).capitalize() + "; "
              + " ".join(rng.choice(WORDS, 3)) + "." for _ in range(ROWS)]
    return pd.DataFrame({
        "clicked": rng.integers(0, 2, ROWS),
        "review": review,
        "order": [f"ord-{rng.integers(1 << 40):x}" for _ in range(ROWS)],
        "order_id": rng.permutation(ROWS) * 7 + 1000,
        "user_id": rng.integers(0, 40, ROWS),
        "genres": ["|".join(rng.choice(["Drama", "War", "Sci Fi"], rng.integers(1, 3)))
                   for _ in range(ROWS)],
        "city": rng.choice(["New York", "Paris", "San Jose"], ROWS),
        "price": rng.gamma(2.0, 10.0, ROWS).round(2),
    })


def test_a_dataframe_written_with_its_index_guesses_what_to_leave_out(tmp_path: Path) -> None:
    frame = shop_frame(np.random.default_rng(1))
    frame.to_csv(tmp_path / "shop.csv")  # pandas writes the index as "Unnamed: 0"
    schema, text = infer(tmp_path / "shop.csv", "csv")
    kinds = {c.name: c.kind for c in schema.columns}
    assert kinds == {"review": "text", "user_id": "categorical",
                     "genres": "multi_categorical", "city": "categorical", "price": "dense"}
    assert set(schema.ignored) == {"Unnamed: 0", "order", "order_id"}
    assert schema.column("genres").sep == "|"
    assert "an index a DataFrame wrote" in comment(text, '"Unnamed: 0"')
    assert "text, 100.0% distinct: a row id" in comment(text, "order")
    assert "integers named like an id, 100.0% distinct" in comment(text, "order_id")
    assert "free text" in comment(text, "review")
    assert "short values separated by '|'" in comment(text, "genres")
    ds = open_dataset(str(converts(tmp_path / "shop.csv", "csv", text, tmp_path)))
    assert ds.num_rows == ROWS
    batch = next(ds.iter_batches(ROWS))
    assert set(batch.bags) == {"review", "genres"}
    lengths = np.diff(batch.bags["review"].offsets)
    assert lengths.min() >= 6  # every word of every review, the ones after ';' included
    stored = pq.read_table(next((tmp_path / "ds").glob("*.parquet")))
    assert "order" not in stored.column_names
    assert "Unnamed: 0" not in stored.column_names


def test_row_numbers_and_a_parquet_index_are_left_out(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"y": rng.integers(0, 2, ROWS), "rownum": np.arange(1, ROWS + 1),
                          "visits": rng.integers(0, 9, ROWS)}, index=np.arange(ROWS) + 5)
    frame.to_parquet(tmp_path / "t.parquet", index=True)  # stored as __index_level_0__
    assert "__index_level_0__" in pq.read_schema(tmp_path / "t.parquet").names
    schema, text = infer(tmp_path / "t.parquet", "parquet")
    assert set(schema.ignored) == {"__index_level_0__", "rownum"}
    assert [c.name for c in schema.columns] == ["visits"]
    assert "row numbers (1, 2, ... on every row)" in comment(text, "rownum")
    converts(tmp_path / "t.parquet", "parquet", text, tmp_path)


def test_lists_of_doubles_are_vectors_and_the_guess_converts(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    table = pa.table({
        "label": rng.integers(0, 2, ROWS),
        "embedding": pa.array([rng.normal(size=4).tolist() for _ in range(ROWS)],
                               pa.list_(pa.float64())),
        "tags": pa.array([rng.integers(0, 50, rng.integers(1, 4)).tolist() for _ in range(ROWS)],
                         pa.list_(pa.int64())),
        "ragged": pa.array([rng.normal(size=rng.integers(1, 3)).tolist() for _ in range(ROWS)]),
    })
    pq.write_table(table, tmp_path / "items.parquet")
    schema, text = infer(tmp_path / "items.parquet", "parquet")
    assert {c.name: c.kind for c in schema.columns} == {"embedding": "dense_vector",
                                                        "tags": "multi_categorical"}
    assert schema.column("embedding").length == 4
    assert "lists of numbers, 4 in every row" in comment(text, "embedding")
    assert "lists of integers" in comment(text, "tags")
    assert schema.ignored == ("ragged",)
    assert "of 2 lengths (1 to 2)" in comment(text, "ragged")
    ds = open_dataset(str(converts(tmp_path / "items.parquet", "parquet", text, tmp_path)))
    batch = next(ds.iter_batches(ROWS))
    np.testing.assert_allclose(batch.vectors["embedding"],
                               np.array(table.column("embedding").to_pylist(), np.float32))


def test_vectors_written_as_text_are_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"target": rng.normal(size=50),
                          "emb": [str(rng.normal(size=3).round(3).tolist()) for _ in range(50)]})
    frame.to_csv(tmp_path / "v.csv", index=False)  # "[0.123, -1.5, 0.7]"
    schema, text = infer(tmp_path / "v.csv", "csv")
    assert schema.label_kind == "float"
    assert schema.column("emb").kind == "dense_vector"
    assert yaml.safe_load(text)["columns"]["emb"] == {"kind": "dense_vector", "length": 3}
    ds = open_dataset(str(converts(tmp_path / "v.csv", "csv", text, tmp_path)))
    assert next(ds.iter_batches(50)).vectors["emb"].shape == (50, 3)


def test_short_repeated_text_stays_categorical_and_few_rows_prove_no_uniqueness(
        tmp_path: Path) -> None:
    (tmp_path / "few.csv").write_text("clicked,name,code,id\n1,Ann Lee,a1,0\n0,Bob Ray,b2,1\n"
                                      "1,Cy Hu,c3,2\n")
    schema, _ = infer(tmp_path / "few.csv", "csv")
    kinds = {c.name: c.kind for c in schema.columns}
    # Three distinct values in three rows say nothing; two-word names, mostly distinct: text.
    assert kinds == {"name": "text", "code": "categorical", "id": "categorical"}
    assert schema.ignored == ()
