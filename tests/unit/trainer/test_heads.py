"""A multi-task model's heads: a weighted sum of per-kind losses, each head's metrics by name,
and clear errors for outputs that do not name the heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional

from elasticps.data import write_dataset
from elasticps.data.batch import Batch
from elasticps.errors import ConfigError
from elasticps.trainer.heads import Head, HeadsObjective
from elasticps.trainer.metrics import metrics_for
from elasticps.trainer.trainer import Trainer

LABELS = [("click", "binary"), ("dwell", "float"), ("topic", "class")]
RNG = np.random.default_rng(4)
B = 12


def batch(weight: bool = False) -> Batch:
    label = np.stack([RNG.integers(0, 2, B), RNG.normal(size=B), RNG.integers(0, 4, B)],
                     axis=1).astype(np.float32)
    return Batch(label=label, weight=RNG.uniform(0.5, 2, B).astype(np.float32) if weight
                 else None)


def outputs() -> dict[str, torch.Tensor]:
    return {"click": torch.randn(B, 1), "dwell": torch.randn(B), "topic": torch.randn(B, 4)}


def test_the_loss_is_the_weighted_sum_of_each_kinds_default_loss() -> None:
    data, out = batch(weight=True), outputs()
    tensors = data.to_torch()
    objective = HeadsObjective(LABELS, {"click": 1.0, "dwell": Head(weight=0.5), "topic": 2.0})
    w, label = tensors.weight, tensors.label
    assert w is not None
    expected = (
        (functional.binary_cross_entropy_with_logits(out["click"].squeeze(1), label[:, 0],
                                                     reduction="none") * w).mean()
        + 0.5 * ((out["dwell"] - label[:, 1]).square() * w).mean()
        + 2.0 * (functional.cross_entropy(out["topic"], label[:, 2].long(), reduction="none")
                 * w).mean())
    assert torch.allclose(objective.score(out, tensors).loss, expected)


def test_every_label_is_a_head_of_weight_one_unless_heads_are_named() -> None:
    data, out = batch(), outputs()
    everything = HeadsObjective(LABELS).score(out, data.to_torch()).loss
    only_click = HeadsObjective(LABELS, {"click": 1.0}).score(out, data.to_torch()).loss
    click = functional.binary_cross_entropy_with_logits(out["click"].squeeze(1),
                                                        torch.from_numpy(data.label[:, 0]))
    assert torch.allclose(only_click, click)
    assert everything > only_click


def test_a_head_may_bring_its_own_loss() -> None:
    data, out = batch(), outputs()
    mae = Head(loss_fn=lambda pred, label: (pred - label).abs().mean())
    loss = HeadsObjective(LABELS, {"dwell": mae}).score(out, data.to_torch()).loss
    assert torch.allclose(loss, (out["dwell"] - torch.from_numpy(data.label[:, 1])).abs().mean())


def test_each_head_reports_its_kinds_metrics_under_its_name() -> None:
    objective = HeadsObjective(LABELS)
    metrics = objective.metrics()
    per_head = {name: metrics_for(kind) for name, kind in LABELS}
    for _ in range(3):
        data, out = batch(), outputs()
        scored = objective.score(out, data.to_torch())
        metrics.add(scored.output, scored.label, float(scored.loss))
        for column, (name, kind) in enumerate(LABELS):
            label = torch.from_numpy(data.label[:, column])
            per_head[name].add(out[name], label.long() if kind == "class" else label, 0.0)
    result = metrics.result()
    expected = {f"{name}_{key}": value for name, m in per_head.items()
                for key, value in m.result().items() if key not in ("cost", "samples")}
    assert {k: result[k] for k in expected} == pytest.approx(expected)
    assert {"click_auc", "dwell_rmse", "topic_accuracy", "topic_perplexity"} <= set(result)
    assert result["samples"] == 3 * B
    assert metrics.headline(result) == ["click_auc", "dwell_rmse", "topic_accuracy",
                                        "topic_perplexity"]


@pytest.mark.parametrize(("heads", "output", "match"), [
    (None, torch.randn(B, 3), r"returns \{head: output\}"),
    (None, {"click": torch.randn(B)}, r"no head\(s\) \['dwell', 'topic'\]"),
    ({"clicks": 1.0}, {}, r"heads \['clicks'\] name no label"),
    ({"click": -1.0}, {}, "weight=-1.0"),
    ({}, {}, "trains nothing"),
])
def test_outputs_and_heads_that_do_not_fit_are_refused_naming_them(heads, output, match) -> None:
    with pytest.raises(ConfigError, match=match):
        HeadsObjective(LABELS, heads).score(output, batch().to_torch())


def test_a_label_set_cannot_be_a_head() -> None:
    with pytest.raises(ConfigError, match="a multi_label label cannot be a head"):
        HeadsObjective([("tags", "multi_label")])


def test_a_trainer_trains_heads_for_a_dataset_whose_labels_mix_kinds(tmp_path: Path) -> None:
    """Labels of mixed kinds make every label a head of weight 1 (or those heads= names); a
    loss_fn, which has no head to go to, is refused naming the labels' kinds."""
    url = str(tmp_path / "d")
    write_dataset({"click": [1, 0], "dwell": [0.5, 1.0], "topic": [2, 0], "x": [1.0, 2.0]}, url,
                  {"labels": ["click", {"name": "dwell", "kind": "float"},
                              {"name": "topic", "kind": "class", "classes": 3}],
                   "columns": {"x": "dense"}})
    model = torch.nn.Linear(1, 1)
    every = Trainer(model).objective(url)
    assert isinstance(every, HeadsObjective)
    assert [(t.name, t.head.weight) for t in every.tasks] == [("click", 1.0), ("dwell", 1.0),
                                                              ("topic", 1.0)]
    named = Trainer(model, heads={"topic": 2.0}).objective(url)
    assert isinstance(named, HeadsObjective)
    assert [(t.name, t.head.weight) for t in named.tasks] == [("topic", 2.0)]
    with pytest.raises(ConfigError, match=r"kinds \['binary', 'float', 'class'\]"):
        Trainer(model, loss_fn=lambda out, label: out.sum()).objective(url)
    with pytest.raises(ConfigError, match="not loss_fn= or label_kind="):
        Trainer(model, heads={"topic": 1.0}, label_kind="class")
