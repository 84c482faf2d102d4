"""The default loss by label kind, per-row weights, and how a user's loss is called."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.nn import functional

from elasticps.data.batch import Batch, TensorBatch
from elasticps.errors import ConfigError
from elasticps.trainer.objective import Objective
from elasticps.trainer.recall import InBatchRecall

torch.manual_seed(3)
B = 6
WEIGHT = torch.rand(B) + 0.5


def loss(kind: str, output: torch.Tensor, label: torch.Tensor,
         weight: torch.Tensor | None = None) -> torch.Tensor:
    objective = Objective(kind)
    target = objective.target(label)
    return objective.loss(objective.fit_output(output, target), target, weight)


def test_binary_is_bce_with_logits_and_weights_scale_rows() -> None:
    logits, label = torch.randn(B, 1), torch.randint(0, 2, (B,)).float()
    expected = torch.nn.BCEWithLogitsLoss()(logits.squeeze(1), label)
    assert torch.allclose(loss("binary", logits, label), expected)
    weighted = torch.nn.BCEWithLogitsLoss(weight=WEIGHT)(logits.squeeze(1), label)
    assert torch.allclose(loss("binary", logits, label, WEIGHT), weighted)
    per_row = torch.nn.functional.binary_cross_entropy_with_logits(
        logits.squeeze(1), label, reduction="none")
    assert torch.allclose(weighted, (WEIGHT * per_row).mean())  # mean over rows of w * loss


def test_multi_label_averages_bce_over_classes_with_one_weight_per_row() -> None:
    logits, label = torch.randn(B, 4), torch.randint(0, 2, (B, 4)).float()
    assert torch.allclose(loss("multi_label", logits, label),
                          torch.nn.BCEWithLogitsLoss()(logits, label))
    per_row = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, label, reduction="none").mean(1)
    assert torch.allclose(loss("multi_label", logits, label, WEIGHT), (WEIGHT * per_row).mean())


def test_float_is_mean_squared_error() -> None:
    pred, label = torch.randn(B), torch.randn(B)
    assert torch.allclose(loss("float", pred, label), torch.nn.MSELoss()(pred, label))
    assert torch.allclose(loss("float", pred, label, WEIGHT),
                          (WEIGHT * (pred - label) ** 2).mean())
    with pytest.raises(ConfigError, match=r"float labels of shape \(6,\) need an output"):
        loss("float", torch.randn(B, 2), label)


def test_class_is_cross_entropy_over_class_logits() -> None:
    logits, label = torch.randn(B, 5), torch.randint(0, 5, (B,)).float()
    expected = torch.nn.CrossEntropyLoss()(logits, label.long())
    assert torch.allclose(loss("class", logits, label), expected)
    per_row = torch.nn.functional.cross_entropy(logits, label.long(), reduction="none")
    assert torch.allclose(loss("class", logits, label, WEIGHT), (WEIGHT * per_row).mean())
    with pytest.raises(ConfigError, match=r"\[B, classes\] logits"):
        loss("class", torch.randn(B), label)


def test_a_custom_loss_gets_the_weights_only_if_it_asks_for_them(
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[object] = []

    def weighted(output: torch.Tensor, label: torch.Tensor,
                 weight: torch.Tensor | None = None) -> torch.Tensor:
        seen.append(weight)
        return output.sum()

    logits, label = torch.randn(B), torch.ones(B)
    Objective("binary", weighted).loss(logits, label, WEIGHT)
    Objective("binary", weighted).loss(logits, label, None)
    assert seen[0] is WEIGHT
    assert seen[1] is None
    plain = Objective("binary", torch.nn.BCEWithLogitsLoss())  # forward(input, target)
    with caplog.at_level(logging.WARNING):
        first = plain.loss(logits, label, WEIGHT)
        plain.loss(logits, label, WEIGHT)
    assert torch.allclose(first, torch.nn.BCEWithLogitsLoss()(logits, label))
    assert [r.message for r in caplog.records].count(
        "The batches carry per-row weights but loss_fn takes no 'weight' parameter, so they "
        "are ignored (see docs/trainer.md, Losses).") == 1


def test_unknown_label_kind() -> None:
    with pytest.raises(ConfigError, match="label kind 'ordinal'"):
        Objective("ordinal")


def _batch(label: torch.Tensor, weight: torch.Tensor | None = None) -> TensorBatch:
    return Batch(label=label.numpy(), weight=None if weight is None else weight.numpy()
                 ).to_torch()


def test_a_custom_loss_gets_any_output_as_it_is_and_the_batch_if_it_asks() -> None:
    """A two-tower model's [B, B] scores against [B] labels: no reshape, no shape check, and
    the loss sees the batch; the label kind's metrics do not suit it, so only cost is kept."""
    seen: dict[str, object] = {}

    def in_batch_softmax(scores: torch.Tensor, label: torch.Tensor,
                         batch: TensorBatch) -> torch.Tensor:
        seen.update(scores=scores, batch=batch)
        return functional.cross_entropy(scores, torch.arange(scores.shape[0]))

    objective = Objective("binary", in_batch_softmax)
    scores, batch = torch.randn(B, B), _batch(torch.ones(B))
    scored = objective.score(scores, batch)
    assert seen["scores"] is scores
    assert seen["batch"] is batch
    assert scored.output is scores
    assert torch.allclose(scored.loss, functional.cross_entropy(scores, torch.arange(B)))
    metrics = objective.metrics()
    metrics.add(scores, batch.label, float(scored.loss))
    assert set(metrics.result()) == {"cost", "samples"}
    # A default loss still refuses that output, naming both shapes.
    with pytest.raises(ConfigError, match=r"binary labels of shape \(6,\) need an output"):
        Objective("binary").score(scores, batch)


def test_a_custom_loss_keeps_the_label_kinds_metrics_while_its_outputs_suit_them() -> None:
    objective = Objective("binary", lambda out, label: functional.binary_cross_entropy_with_logits(
        out.squeeze(1), label))
    metrics = objective.metrics()
    logits, label = torch.randn(B, 1), torch.tensor([0.0, 1, 0, 1, 1, 0])
    metrics.add(logits, label, 0.5)
    assert {"auc", "logloss", "cost"} <= set(metrics.result())


def test_a_models_own_metrics_replace_the_label_kinds() -> None:
    objective = Objective("binary", lambda out, label: out.sum(),
                          metrics=lambda: InBatchRecall(ks=(1,)))
    metrics = objective.metrics()
    metrics.add(torch.eye(B), torch.ones(B), 1.0)  # every positive ranked first
    assert metrics.result() == {"recall_at_1": 1.0, "mean_rank": 0.0, "cost": 1.0,
                                "samples": float(B)}
    with pytest.raises(ConfigError, match=r"not an elasticps\.metrics\.MetricAccumulator"):
        Objective("binary", metrics=lambda: {}).metrics()  # type: ignore[arg-type,return-value]
