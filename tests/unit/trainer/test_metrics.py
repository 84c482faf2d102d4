"""Metrics by label kind against numpy references written from their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from elasticps.errors import ConfigError
from elasticps.trainer.metrics import metrics_for


def pairwise_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting one half: every pair."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (pos.size * neg.size))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def feed(kind: str, outputs: list[np.ndarray], labels: list[np.ndarray],
         losses: list[float]) -> dict[str, float]:
    metrics = metrics_for(kind)
    for out, label, loss in zip(outputs, labels, losses, strict=True):
        metrics.add(torch.from_numpy(out), torch.from_numpy(label), loss)
    return metrics.result()


RNG = np.random.default_rng(11)


def test_binary_auc_and_logloss() -> None:
    logits = [RNG.normal(size=40).astype(np.float32), RNG.normal(size=25).astype(np.float32)]
    logits[1][:5] = logits[0][:5]  # some tied scores
    labels = [RNG.integers(0, 2, 40).astype(np.float32), RNG.integers(0, 2, 25).astype(np.float32)]
    result = feed("binary", logits, labels, [0.5, 0.9])
    y, z = np.concatenate(labels), np.concatenate(logits)
    probs = torch.sigmoid(torch.from_numpy(z)).numpy()  # the float32 scores the AUC ranks
    assert result["auc"] == pytest.approx(pairwise_auc(y, probs), abs=1e-12)
    assert result["logloss"] == pytest.approx(logloss(y, sigmoid(z)), rel=1e-6)
    assert result["cost"] == pytest.approx((0.5 * 40 + 0.9 * 25) / 65)
    assert result["samples"] == 65


def test_binary_accepts_one_logit_per_row_in_any_shape_and_keeps_recent_rows() -> None:
    metrics = metrics_for("binary", cap=10)
    old = np.linspace(-1, 1, 10).astype(np.float32)
    metrics.add(torch.from_numpy(old[:, None]), torch.from_numpy((old > 0).astype(np.float32)), 0)
    new = np.linspace(-1, 1, 10).astype(np.float32)
    flipped = (new < 0).astype(np.float32)  # perfectly wrong: only these rows count for AUC
    metrics.add(torch.from_numpy(new), torch.from_numpy(flipped), 0)
    assert metrics.result()["auc"] == 0.0
    with pytest.raises(ConfigError, match="one logit per label entry"):
        metrics.add(torch.zeros(4, 2), torch.zeros(4), 0)


def test_regression_rmse_and_mae() -> None:
    preds = [RNG.normal(size=(n, 2)).astype(np.float32) for n in (30, 10)]
    labels = [RNG.normal(size=(n, 2)).astype(np.float32) for n in (30, 10)]
    result = feed("float", preds, labels, [1.0, 2.0])
    err = np.concatenate(preds).astype(np.float64) - np.concatenate(labels)
    assert result["rmse"] == pytest.approx(math.sqrt(np.mean(err ** 2)), rel=1e-9)
    assert result["mae"] == pytest.approx(np.mean(np.abs(err)), rel=1e-9)
    assert result["cost"] == pytest.approx(1.25)


def test_multi_label_macro_auc_skips_classes_without_both_labels() -> None:
    logits = RNG.normal(size=(50, 4)).astype(np.float32)
    labels = RNG.integers(0, 2, (50, 4)).astype(np.float32)
    labels[:, 2] = 0.0  # never present: no AUC for class 2
    labels[:, 3] = 1.0  # always present: none for class 3 either
    result = feed("multi_label", [logits[:20], logits[20:]], [labels[:20], labels[20:]], [0, 0])
    probs = torch.sigmoid(torch.from_numpy(logits)).numpy()
    expected = np.mean([pairwise_auc(labels[:, c], probs[:, c]) for c in (0, 1)])
    assert result["auc"] == pytest.approx(expected, abs=1e-12)
    assert result["logloss"] == pytest.approx(logloss(labels, sigmoid(logits)), rel=1e-6)
    assert result["samples"] == 50


def test_class_accuracy_cross_entropy_and_perplexity() -> None:
    logits = RNG.normal(size=(60, 7)).astype(np.float32) * 2
    labels = RNG.integers(0, 7, 60).astype(np.float32)  # class indices, as Batch.label holds
    result = feed("class", [logits[:35], logits[35:]], [labels[:35], labels[35:]], [0, 0])
    z = logits.astype(np.float64)
    log_softmax = z - z.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    ce = float(-np.mean(log_softmax[np.arange(60), labels.astype(int)]))
    assert result["accuracy"] == pytest.approx(np.mean(z.argmax(1) == labels))
    assert result["cross_entropy"] == pytest.approx(ce, rel=1e-9)
    assert result["perplexity"] == pytest.approx(math.exp(ce), rel=1e-9)
    with pytest.raises(ConfigError, match=r"\[B, classes\] logits"):
        metrics_for("class").add(torch.zeros(5), torch.zeros(5), 0)


def test_nothing_seen_and_unknown_kinds() -> None:
    assert metrics_for("float").result() == {"samples": 0.0}
    with pytest.raises(ConfigError, match="label kind 'ranking'"):
        metrics_for("ranking")


def test_several_binary_labels_get_their_own_auc_and_a_macro_auc() -> None:
    logits = RNG.normal(size=(60, 3)).astype(np.float32)
    labels = RNG.integers(0, 2, (60, 3)).astype(np.float32)
    labels[:, 2] = (logits[:, 2] > 0).astype(np.float32)  # one label the scores predict exactly
    metrics = metrics_for("binary", names=["click", "buy", "like"])
    metrics.add(torch.from_numpy(logits[:40]), torch.from_numpy(labels[:40]), 0.0)
    metrics.add(torch.from_numpy(logits[40:]), torch.from_numpy(labels[40:]), 0.0)
    result = metrics.result()
    probs = torch.sigmoid(torch.from_numpy(logits)).numpy()
    each = [pairwise_auc(labels[:, k], probs[:, k]) for k in range(3)]
    assert result["auc_like"] == 1.0
    for k, name in enumerate(["click", "buy", "like"]):
        assert result[f"auc_{name}"] == pytest.approx(each[k], abs=1e-12)
        assert result[f"logloss_{name}"] == pytest.approx(
            logloss(labels[:, k], sigmoid(logits[:, k])), rel=1e-6)
    assert result["auc"] == pytest.approx(np.mean(each), abs=1e-12)
    assert result["logloss"] == pytest.approx(logloss(labels, sigmoid(logits)), rel=1e-6)


def test_several_float_labels_get_their_own_rmse_and_mae() -> None:
    preds = RNG.normal(size=(30, 2)).astype(np.float32)
    labels = RNG.normal(size=(30, 2)).astype(np.float32)
    labels[:, 1] *= 10
    result = feed_named("float", preds, labels, ["price", "area"])
    err = preds.astype(np.float64) - labels
    assert result["rmse_price"] == pytest.approx(math.sqrt(np.mean(err[:, 0] ** 2)), rel=1e-9)
    assert result["rmse_area"] == pytest.approx(math.sqrt(np.mean(err[:, 1] ** 2)), rel=1e-9)
    assert result["mae_area"] == pytest.approx(np.mean(np.abs(err[:, 1])), rel=1e-9)
    assert result["rmse"] == pytest.approx(math.sqrt(np.mean(err ** 2)), rel=1e-9)


def test_one_label_has_no_per_label_metrics() -> None:
    result = feed_named("float", RNG.normal(size=10).astype(np.float32),
                        RNG.normal(size=10).astype(np.float32), ["price"])
    assert set(result) == {"rmse", "mae", "cost", "samples"}


def feed_named(kind: str, outputs: np.ndarray, labels: np.ndarray,
               names: list[str]) -> dict[str, float]:
    metrics = metrics_for(kind, names=names)
    metrics.add(torch.from_numpy(outputs), torch.from_numpy(labels), 0.0)
    return metrics.result()
