"""Labels by value: binary words, class labels of any integers or strings (found at conversion,
listed in the schema, or taken ``--like`` a training set), 1-based ratings; ``--infer --label``
guessing a label's kind from its values."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticps.data import open_dataset, write_dataset
from elasticps.data.schema import LabelSpec, Schema
from elasticps.errors import ConfigError, DataError
from tests.helpers import run_cli


def labels_of(url: Path) -> list[float]:
    return [float(v) for batch in open_dataset(str(url)).iter_batches(100)
            for v in batch.label]


def convert_csv(tmp_path: Path, text: str, schema: str, *args: str,
                name: str = "data") -> tuple[int, str, str]:
    src = tmp_path / f"{name}.csv"
    src.write_text(text)
    schema_file = tmp_path / f"{name}.yaml"
    schema_file.write_text(schema)
    done = run_cli("data", "convert", "csv", str(src), "--schema", str(schema_file), "--out",
                   str(tmp_path / name), "--no-progress", *args)
    return done.returncode, done.stdout, done.stderr


def test_binary_labels_read_booleans_and_yes_no_words_in_any_case(tmp_path: Path) -> None:
    words = ["True", "false", "YES", "no", "y", "N", "t", "F", "1", "0.0"]
    rows = "".join(f"{word},{i}\n" for i, word in enumerate(words))
    code, _, err = convert_csv(tmp_path, "churn,x\n" + rows, "label: churn\ncolumns: {x: dense}")
    assert code == 0, err
    assert labels_of(tmp_path / "data") == [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert open_dataset(str(tmp_path / "data")).manifest.num_positive == 5


def test_a_binary_label_that_is_no_such_word_is_a_malformed_row_naming_it(
        tmp_path: Path) -> None:
    code, _, err = convert_csv(tmp_path, "churn,x\nyes,1\nmaybe,2\n",
                               "label: churn\ncolumns: {x: dense}")
    assert code == 1
    assert "data.csv:3:churn: the label is 'maybe', expected 0 or 1 (or true/false, yes/no" in err
    assert not (tmp_path / "data").exists()


def test_string_classes_are_the_values_seen_sorted_and_map_to_their_index(
        tmp_path: Path) -> None:
    code, _, err = convert_csv(tmp_path, "site,x\ncp,1\nim,2\n om ,3\ncp,4\nimU,5\n",
                               "label: {name: site, kind: class}\ncolumns: {x: dense}")
    assert code == 0, err
    spec = open_dataset(str(tmp_path / "data")).schema.labels[0]
    assert spec.values == ("cp", "im", "imU", "om")
    assert spec.classes == 4
    assert labels_of(tmp_path / "data") == [0, 1, 3, 0, 2]


def test_one_based_ratings_are_classes_by_value(tmp_path: Path) -> None:
    rows = "".join(f"{r},{i}\n" for i, r in enumerate([5, 1, 3, "2.0", 4, 10]))
    code, _, err = convert_csv(tmp_path, "rating,x\n" + rows,
                               "label: {name: rating, kind: class}\ncolumns: {x: dense}")
    assert code == 0, err
    assert open_dataset(str(tmp_path / "data")).schema.labels[0].values == (1, 2, 3, 4, 5, 10)
    assert labels_of(tmp_path / "data") == [4, 0, 2, 1, 3, 5]


def test_classes_listed_in_the_schema_keep_their_order_and_refuse_others(
        tmp_path: Path) -> None:
    schema = "label: {name: rating, kind: class, classes: [5, 4, 3, 2, 1]}\ncolumns: {x: dense}"
    code, _, err = convert_csv(tmp_path, "rating,x\n5,1\n1,2\n6,3\n", schema, "--max-bad-rows",
                               "1")
    assert code == 0, err
    assert "data.csv:4:rating: the label '6' is not one of the classes [5, 4, 3, 2, 1]" in err
    assert labels_of(tmp_path / "data") == [0, 4]


def test_a_class_count_still_means_indices_and_says_how_to_take_values(tmp_path: Path) -> None:
    code, _, err = convert_csv(tmp_path, "rating,x\n1,1\n5,2\n",
                               "label: {name: rating, kind: class, classes: 5}\n"
                               "columns: {x: dense}")
    assert code == 1
    assert ("data.csv:3:rating: the label is 5, expected a class in [0, 5) (drop 'classes' to "
            "take the values as the classes)") in err


def test_a_test_split_like_its_training_set_takes_its_classes(tmp_path: Path) -> None:
    schema = "label: {name: site, kind: class}\ncolumns: {x: dense}"
    code, _, err = convert_csv(tmp_path, "site,x\ncp,1\nim,2\nom,3\n", schema, name="train")
    assert code == 0, err
    code, _, err = convert_csv(tmp_path, "site,x\nom,1\ncp,2\n", schema, "--like",
                               str(tmp_path / "train"), name="test")
    assert code == 0, err
    assert open_dataset(str(tmp_path / "test")).schema.labels[0].values == ("cp", "im", "om")
    assert labels_of(tmp_path / "test") == [2, 0]
    # A class the training set never had is a malformed row that names the value.
    code, _, err = convert_csv(tmp_path, "site,x\nom,1\npp,2\n", schema, "--like",
                               str(tmp_path / "train"), name="unseen")
    assert code == 1
    assert "unseen.csv:3:site: the label 'pp' is not one of the classes ['cp', 'im', 'om']" in err


def test_like_orders_the_columns_as_the_training_set(tmp_path: Path) -> None:
    code, _, err = convert_csv(tmp_path, "y,b,a\n1,1,2\n0,3,4\n",
                               "label: y\ncolumns: {b: dense, a: dense}", name="train")
    assert code == 0, err
    code, _, err = convert_csv(tmp_path, "y,b,a\n1,5,6\n", "label: y\ncolumns: {a: dense, "
                               "b: dense}", "--like", str(tmp_path / "train"), name="test")
    assert code == 0, err
    batch = next(open_dataset(str(tmp_path / "test")).iter_batches(10))
    assert batch.dense_names == ("b", "a")


def test_a_class_label_with_one_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"at least 2 classes, got \['a'\]"):
        write_dataset({"y": ["a", "a"], "x": [1.0, 2.0]}, str(tmp_path / "d"),
                      {"label": {"name": "y", "kind": "class"}, "columns": {"x": "dense"}})
    assert not (tmp_path / "d").exists()


def test_a_read_of_a_class_outside_the_manifest_is_a_data_error(tmp_path: Path) -> None:
    write_dataset({"y": ["a", "b"], "x": [1.0, 2.0]}, str(tmp_path / "d"),
                  {"label": {"name": "y", "kind": "class"}, "columns": {"x": "dense"}})
    dataset = open_dataset(str(tmp_path / "d"))
    narrower = Schema.from_dict({**dataset.schema.to_dict(), "labels": [
        {"name": "y", "kind": "class", "values": ["a", "c"]}]})
    from elasticps.data import iter_batches

    with pytest.raises(DataError, match=r"holds 'b' at row 1, which is not one of its 2 classes"):
        list(iter_batches(dataset.url, dataset.chunks[0], 10, schema=narrower))


def test_the_normalised_form_keeps_the_values_and_reads_back() -> None:
    spec = LabelSpec("y", "class", values=(3, 1, 2))
    assert spec.classes == 3
    assert spec.to_dict() == {"name": "y", "kind": "class", "classes": 3, "sep": None,
                              "values": [3, 1, 2]}
    schema = Schema(labels=(spec,), columns=())
    assert Schema.from_dict(schema.to_dict()) == schema
    listed = Schema.from_dict({"label": {"name": "y", "kind": "class", "classes": ["b", "a"]}})
    assert listed.labels[0].values == ("b", "a")
    assert listed.num_classes == 2


@pytest.mark.parametrize(("label", "match"), [
    ({"name": "y", "kind": "class", "classes": [True, False]}, "quote words"),
    ({"name": "y", "kind": "class", "classes": [1, "1"]}, r"\['1'\] are listed twice"),
    ({"name": "y", "kind": "class", "classes": 3, "values": [1, 2]}, "classes is 3 but 2"),
    ({"name": "y", "kind": "binary", "values": [0, 1]}, "class labels only"),
    ({"name": "y", "kind": "class", "classes": [1.5, 2]}, "1.5 is not an integer or a string"),
])
def test_bad_class_values_are_named(label: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Schema.from_dict({"label": label})


def infer(tmp_path: Path, text: str, *args: str) -> str:
    src = tmp_path / "in.csv"
    src.write_text(text)
    done = run_cli("data", "convert", "csv", str(src), "--infer", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_infer_label_guesses_the_kind_from_the_values(tmp_path: Path) -> None:
    prices = "".join(f"{100 + 7 * i},{i % 2 == 0},{'abc'[i % 3]},{i % 5 + 1},{i}.5\n"
                     for i in range(30))
    text = "price,churn,site,stars,score\n" + prices
    kinds = {}
    for column in ("price", "churn", "site", "stars", "score"):
        schema = Schema.from_yaml(infer(tmp_path, text, "--label", column))
        assert schema.labels[0].name == column
        assert column not in [c.name for c in schema.columns]
        kinds[column] = schema.label_kind
    assert kinds == {"price": "float", "churn": "binary", "site": "class", "stars": "class",
                     "score": "float"}
    assert "5 classes in the sample: 1, 2, 3, 4, 5" in infer(tmp_path, text, "--label", "stars")


def test_infer_without_label_takes_a_true_false_column(tmp_path: Path) -> None:
    out = infer(tmp_path, "age,bought\n30,True\n41,False\n")
    assert out.splitlines()[2] == "label: bought"
    assert "first binary one (pass --label COL to choose)" in out


def test_the_inferred_schema_converts_a_yes_no_table(tmp_path: Path) -> None:
    text = "age,Subscribed,tier\n30,yes,gold\n41,No,silver\n25,YES,gold\n"
    guessed = infer(tmp_path, text, "--label", "Subscribed")
    code, _, err = convert_csv(tmp_path, text, guessed)
    assert code == 0, err
    assert labels_of(tmp_path / "data") == [1, 0, 1]


def test_infer_label_names_a_column_that_is_not_there(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("a,b\n1,2\n")
    done = run_cli("data", "convert", "csv", str(src), "--infer", "--label", "c")
    assert done.returncode != 0
    assert "--label 'c': the input has no such column (it has ['a', 'b'])" in done.stderr


def test_training_refuses_a_test_set_whose_classes_have_other_indices(tmp_path: Path) -> None:
    from elasticps.trainer.dataset_reader import check_test_classes

    schema = {"label": {"name": "y", "kind": "class"}, "columns": {"x": "dense"}}
    write_dataset({"y": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]}, str(tmp_path / "train"), schema)
    write_dataset({"y": ["a", "c"], "x": [1.0, 2.0]}, str(tmp_path / "own"), schema)
    write_dataset({"y": ["a", "c"], "x": [1.0, 2.0]}, str(tmp_path / "like"), schema,
                  like=str(tmp_path / "train"))
    with pytest.raises(ConfigError, match=r"has the classes \('a', 'c'\) for label 'y', the "
                       r"training data .* \('a', 'b', 'c'\): convert the test data with --like"):
        check_test_classes(str(tmp_path / "train"), str(tmp_path / "own"))
    check_test_classes(str(tmp_path / "train"), str(tmp_path / "like"))
