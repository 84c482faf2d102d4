"""The declared schema: the user's YAML, the normalised form a manifest stores, clear errors."""

from __future__ import annotations

import pytest

from elasticps.data.schema import DenseStats, Schema
from elasticps.errors import ConfigError

USER_SCHEMA = """
label: clicked
defaults: {table: features, dim: 8, id_space: 1000003}
columns:
  age: dense
  income: {kind: dense, norm: log}
  country: categorical
  genres: {kind: multi_categorical, sep: "|"}
  user_id: {kind: categorical, table: users, dim: 16, id_space: 100003}
"""


def test_the_users_form_reads_with_defaults_and_tables() -> None:
    schema = Schema.from_yaml(USER_SCHEMA)
    assert schema.label_kind == "binary"
    assert schema.label_width == 1
    assert [c.name for c in schema.dense_columns] == ["age", "income"]
    assert schema.column("age").norm == "standard"
    assert schema.column("income").norm == "log"
    assert schema.column("genres").sep == "|"
    assert {n: (t.dim, t.id_space) for n, t in schema.tables.items()} == {
        "features": (8, 1_000_003), "users": (16, 100_003)}
    assert [c.name for c in schema.columns_of("features")] == ["country", "genres"]
    assert schema.source_columns() == ("clicked", "age", "income", "country", "genres",
                                       "user_id")


def test_the_normalised_form_round_trips_with_stats() -> None:
    schema = Schema.from_yaml(USER_SCHEMA)
    age = schema.column("age")
    filled = schema.replace_column(
        type(age)(**{**age.__dict__, "dtype": "float", "stats": DenseStats(10, 3.0, 1.5, 0, 9)}))
    again = Schema.from_dict(filled.to_dict())
    assert again == filled
    assert again.column("age").stats == DenseStats(10, 3.0, 1.5, 0.0, 9.0)


def test_label_kinds() -> None:
    multi = Schema.from_dict({"label": {"name": "tags", "kind": "multi_label", "classes": 5,
                                        "sep": ";"}, "columns": {"x": "dense"}})
    assert multi.label_width == 5
    word = Schema.from_dict({"label": {"name": "next", "kind": "class", "classes": 1000},
                             "columns": {"w1": {"kind": "categorical", "ids": "passthrough"}}})
    assert word.label_kind == "class"
    assert word.num_classes == 1000
    several = Schema.from_dict({"label": ["click", "buy"], "columns": {"x": "dense"}})
    assert several.label_width == 2


def test_several_labels_may_mix_binary_float_and_class_but_not_a_label_set() -> None:
    mixed = Schema.from_dict({"labels": ["click", {"name": "dwell", "kind": "float"},
                                         {"name": "topic", "kind": "class", "classes": 4}],
                              "columns": {"x": "dense"}})
    assert mixed.label_kind == "mixed"
    assert mixed.label_width == 3
    assert Schema.from_dict(mixed.to_dict()) == mixed
    with pytest.raises(ConfigError, match=r"multi_label label .* cannot be one of several"):
        Schema.from_dict({"labels": ["click", {"name": "tags", "kind": "multi_label",
                                               "classes": 3}], "columns": {"x": "dense"}})


@pytest.mark.parametrize(("doc", "match"), [
    ({"columns": {"x": "dense"}}, "label"),
    ({"label": "y", "columns": {"x": "densee"}}, "column 'x': kind"),
    ({"label": "y", "columns": {"x": {"kind": "dense", "norm": "zscore"}}}, "column 'x': norm"),
    ({"label": "y", "columns": {"x": {"kind": "dense", "table": "t"}}}, "categorical columns"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "dim": 0}}}, "dim"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "frob": 1}}}, "frob"),
    ({"label": "y", "columns": {"a": {"kind": "categorical", "dim": 4},
                                "b": {"kind": "categorical", "dim": 8}}}, "one shape"),
    ({"label": "y", "columns": {"y": "dense"}}, "twice"),
    ({"label": {"name": "y", "kind": "multi_label"}, "columns": {"x": "dense"}}, "classes"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "ids": "passthrough",
                                      "dtype": "string"}}}, "passthrough"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "sep": "|"}}}, "sep"),
    ({"label": "y", "columns": {"x": {"kind": "dense", "dtype": "hex32"}}},
     r"column 'x': a dense column holds numbers \(dtype float, int or int32\), not dtype hex32"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "ids": "passthrough",
                                      "dtype": "hex32"}}}, "passthrough"),
    ({"label": "y", "columns": {"x": {"kind": "categorical", "dtype": "hex"}}},
     "dtype is 'hex'; choose one of int, int32, float, string, hex32"),
    ({"label": "y", "columns": {"x": "dense"}, "missing": "NA"}, "missing"),
])
def test_bad_schemas_name_the_column_and_the_value(doc: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Schema.from_dict(doc)


def test_bad_yaml_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="YAML"):
        Schema.from_yaml("label: [unclosed")
