"""The final line of ``elasticps run`` for every label kind, and the passes of a result that
does not say them."""

from __future__ import annotations

from elasticps.launch.final_metrics import final_lines, headline_metric, passes_trained
from elasticps.store.keys import TrainerProgress


def test_a_binary_job_reports_its_auc_by_pass_and_the_best_achievable() -> None:
    summary = {"label_kind": "binary", "auc": 0.81234, "best_auc": 0.83, "logloss": 0.4,
               "pass_test_auc": [0.7, 0.81234]}
    assert final_lines(summary) == ["test auc by pass: 0.7000, 0.8123",
                                    "final test auc 0.8123 (best achievable 0.8300)"]


def test_a_float_job_reports_its_rmse() -> None:
    summary = {"label_kind": "float", "rmse": 0.25, "mae": 0.2, "auc": None,
               "pass_test_rmse": [0.25]}
    assert final_lines(summary) == ["final test rmse 0.2500"]


def test_a_class_job_reports_its_accuracy() -> None:
    assert final_lines({"label_kind": "class", "accuracy": 0.875, "perplexity": 1.6}) == [
        "final test accuracy 0.8750"]


def test_several_labels_are_each_reported_after_the_macro_figure() -> None:
    summary = {"label_kind": "binary", "auc": 0.8, "auc_click": 0.7, "auc_buy": 0.9,
               "pass_test_auc_click": [0.7], "logloss_buy": 0.3}
    assert final_lines(summary) == ["final test auc 0.8000; buy 0.9000, click 0.7000"]


def test_a_scripts_own_result_is_read_by_the_metric_it_holds() -> None:
    assert headline_metric({"rmse": 3.5, "mine": True}) == "rmse"
    assert final_lines({"accuracy": 0.5}) == ["final test accuracy 0.5000"]
    assert final_lines({"mine": True}) == []
    assert final_lines({"label_kind": "float", "rmse": None}) == []


def test_the_passes_trained_are_the_highest_pass_with_metrics_plus_one() -> None:
    progress = {"trainer-0": TrainerProgress(pass_metrics={"0": {"auc": 0.7},
                                                           "1": {"auc": 0.8}}),
                "trainer-1": TrainerProgress(pass_metrics={"0": {"auc": 0.7}})}
    assert passes_trained(progress) == 2
    assert passes_trained({"trainer-0": TrainerProgress()}) is None
