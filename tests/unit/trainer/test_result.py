"""The job's result: the automatic document of the last pass's metrics, offered only where no
result exists, and ``elasticps.publish_result``, which always wins (real embedded store)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from elasticps.api import publish_result
from elasticps.config import Config
from elasticps.errors import ConfigError
from elasticps.launch.final_metrics import final_lines, headline_figures
from elasticps.store import open_store
from elasticps.store.keys import publish_result_if_absent, read_result
from elasticps.trainer.result import default_result

PASSES = [
    {"auc": 0.70, "logloss": 0.52, "cost": 0.52, "samples": 1000.0, "test_auc": 0.71,
     "test_logloss": 0.50, "test_samples": 300.0, "test_eval_s": 0.2},
    {"auc": 0.75, "logloss": 0.49, "cost": 0.49, "samples": 1000.0, "test_auc": math.nan,
     "test_logloss": 0.47, "test_samples": 300.0, "test_eval_s": 0.1},
]


def test_the_default_result_names_test_metrics_plainly_and_training_ones_with_a_prefix() -> None:
    doc = default_result(PASSES, passes=2, label_kind="binary", trainer="trainer-1")
    assert doc == {
        "passes": 2, "label_kind": "binary", "result_by": "trainer-1",
        "auc": None, "pass_test_auc": [0.71, None],  # NaN (one class seen) becomes null
        "logloss": 0.47, "pass_test_logloss": [0.50, 0.47],
        "test_samples": 300.0, "test_eval_s": 0.1,
        "train_auc": 0.75, "train_logloss": 0.49, "train_cost": 0.49, "train_samples": 1000.0}
    without_test = default_result([{"rmse": 1.5, "samples": 10.0}], passes=1,
                                  label_kind="float", trainer="t")
    assert "rmse" not in without_test  # plain names are test figures only
    assert without_test["train_rmse"] == 1.5


def test_the_headline_names_the_test_metrics_of_the_final_line() -> None:
    """A multi-task model's heads each have their headline figure; the launcher's final line
    shows them (a job with a test auc keeps its own line)."""
    last = {"test_click_auc": 0.8, "test_click_logloss": 0.4, "test_dwell_rmse": 0.5,
            "test_topic_accuracy": 0.6, "test_samples": 10.0}
    doc = default_result([last], passes=1, label_kind="multi_task", trainer="t",
                         headline=["click_auc", "dwell_rmse", "topic_accuracy", "missing"])
    assert doc["headline"] == ["click_auc", "dwell_rmse", "topic_accuracy"]
    assert headline_figures(doc) == "click_auc 0.8000, dwell_rmse 0.5000, topic_accuracy 0.6000"
    assert final_lines(doc) == [
        "final test click_auc 0.8000, dwell_rmse 0.5000, topic_accuracy 0.6000"]
    assert "headline" not in default_result([last], passes=1, label_kind="x", trainer="t")
    assert headline_figures({"headline": ["auc"], "auc": None}) == ""


def test_the_automatic_result_never_replaces_one_already_there(tmp_path: Path) -> None:
    config = Config(store=f"file://{tmp_path / 'store.db'}", job_name="job")
    with open_store(config.store or "", config.job_name) as store:
        assert publish_result_if_absent(store, {"auc": 0.7, "by": "first"})
        assert not publish_result_if_absent(store, {"auc": 0.6, "by": "second"})
        assert read_result(store) == {"auc": 0.7, "by": "first"}
        publish_result({"auc": np.float32(0.5), "nested": {"x": [1, float("inf")]}},
                       config=config)
        assert read_result(store) == {"auc": 0.5, "nested": {"x": [1, None]}}
        assert not publish_result_if_absent(store, {"auc": 0.6, "by": "late trainer"})
        assert read_result(store) == {"auc": 0.5, "nested": {"x": [1, None]}}


def test_an_automatic_result_without_training_metrics_gives_way_to_one_with_them(
        tmp_path: Path) -> None:
    """A trainer that trained nothing in the last pass (another took every task) may finish
    first: its result gives way to a trainer's that trained, never to another untrained one,
    and a script's own result is never replaced."""
    untrained = default_result([{"samples": 0.0, "test_auc": 0.7}], passes=1,
                               label_kind="binary", trainer="t0")
    trained = default_result([{"samples": 800.0, "auc": 0.66, "test_auc": 0.7}], passes=1,
                             label_kind="binary", trainer="t1")
    config = Config(store=f"file://{tmp_path / 'store.db'}", job_name="job")
    with open_store(config.store or "", config.job_name) as store:
        assert publish_result_if_absent(store, untrained)
        assert not publish_result_if_absent(store, dict(untrained, result_by="t2"))
        assert publish_result_if_absent(store, trained)
        assert read_result(store) == trained
        assert not publish_result_if_absent(store, dict(trained, result_by="t3"))
        assert read_result(store)["result_by"] == "t1"  # type: ignore[index]
        publish_result({"auc": 0.5}, config=config)  # a script's own
        assert not publish_result_if_absent(store, trained)
        assert read_result(store) == {"auc": 0.5}


def test_publish_result_refuses_what_it_cannot_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="runs inside a job"):
        publish_result({"auc": 0.5}, config=Config())
    config = Config(store=f"file://{tmp_path / 'store.db'}", job_name="job")
    with pytest.raises(ConfigError, match=r"result value at result.model is a object"):
        publish_result({"model": object()}, config=config)
    with pytest.raises(ConfigError, match="a job result is a mapping"):
        publish_result([("auc", 0.5)], config=config)  # type: ignore[arg-type]
