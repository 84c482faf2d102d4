"""An export records what its model reads (``inputs``): the dense columns in the order the
model reads them, their normalisation, the categorical columns' hashing, the label and its
class values; the manifest keeps the schema's column order; the scorers read it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from elasticps.data import write_dataset
from elasticps.data.manifest import read_manifest
from elasticps.data.model_inputs import model_inputs
from elasticps.trainer.export import export_model
from elasticps.trainer.export_chain import ExportChainError, class_value, read_inputs
from tests.helpers import load_example


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "data"
    write_dataset({"site": ["cp", "om", "im", "cp"], "zeta": [1.0, 2.0, 3.0, 4.0],
                   "alpha": [10.0, 0.0, 5.0, 5.0], "city": ["a", "b", "a", "c"],
                   "mid": [0.5, 0.25, 1.0, 0.0]}, str(out),
                  {"label": {"name": "site", "kind": "class"},
                   "columns": {"zeta": "dense", "alpha": {"kind": "dense", "norm": "minmax"},
                               "city": {"kind": "categorical", "id_space": 1000},
                               "mid": {"kind": "dense", "norm": "log"}}})
    return out


def test_inputs_list_the_dense_columns_in_the_order_the_model_reads_them(dataset: Path) -> None:
    schema = read_manifest(str(dataset)).schema
    inputs = model_inputs(schema)
    assert inputs["dense"] == ["zeta", "alpha", "mid"]
    assert inputs["dense_columns"]["alpha"] == {"dtype": "float", "norm": "minmax",
                                                "missing_value": 0.0, "mean": 5.0,
                                                "std": pytest.approx(3.5355, abs=1e-4),
                                                "min": 0.0, "max": 10.0}
    assert inputs["categorical"]["city"] == {"kind": "categorical", "dtype": "string",
                                             "table": "features", "id_space": 1000,
                                             "ids": "hash",
                                             "salt": schema.column("city").hash_salt,
                                             "sep": None}
    assert inputs["label"] == {"names": ["site"], "kind": "class", "width": 1, "classes": 3,
                               "values": ["cp", "im", "om"], "sep": None}
    assert set(inputs["norms"]) == {"standard", "minmax", "log", "none"}


def test_the_export_keeps_inputs_and_the_schemas_column_order(dataset: Path,
                                                               tmp_path: Path) -> None:
    schema = read_manifest(str(dataset)).schema
    out = export_model(tmp_path / "model", {"w": np.ones((2, 2), np.float32)}, {}, {},
                       schema=schema.to_dict(), inputs=model_inputs(schema))
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["schema"]["columns"]) == ["zeta", "alpha", "city", "mid"]
    inputs = read_inputs(manifest)
    assert inputs["dense"] == ["zeta", "alpha", "mid"]
    assert [class_value(inputs, k) for k in (2, 0)] == ["om", "cp"]


def test_an_export_without_inputs_is_refused_by_name() -> None:
    with pytest.raises(ExportChainError, match="records no 'inputs'"):
        read_inputs({"format": "elasticps.model/1"})
    with pytest.raises(ExportChainError, match="must list column names"):
        read_inputs({"inputs": {"dense": "zeta", "dense_columns": {}, "categorical": {},
                                "label": {}}})
    with pytest.raises(ExportChainError, match=r"lacks \['b'\]"):
        read_inputs({"inputs": {"dense": ["b"], "dense_columns": {}, "categorical": {},
                                "label": {}}})
    assert class_value({"label": {"values": None}}, 3) == 3


def test_the_tabular_scorer_has_no_overflow_for_large_logits() -> None:
    score = load_example("examples/tabular/score.py")
    logits = np.array([-1000.0, -40.0, 0.0, 40.0, 1000.0], dtype=np.float32)
    labels = np.array([0, 0, 1, 1, 1], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = score.metrics("binary", logits, labels)
        probs = score.sigmoid(logits)
    assert result["auc"] == 1.0
    assert probs[0] == 0.0
    assert probs[-1] == 1.0
    assert probs[2] == 0.5


def test_the_tabular_scorer_reports_each_binary_label_and_their_mean() -> None:
    score = load_example("examples/tabular/score.py")
    logits = np.array([[2.0, -1.0], [-2.0, 1.0], [1.0, 3.0], [-1.0, -3.0]])
    labels = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    result = score.metrics("binary", logits, labels, ["click", "buy"])
    assert result["auc_click"] == 1.0
    assert result["auc_buy"] == 0.25
    assert result["auc"] == 0.625
