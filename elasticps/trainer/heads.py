"""Multi-task models: one head per label column, each of its own kind, loss, weight and metrics.

A dataset whose schema declares several labels of different kinds (binary, float and class
mixed) trains a model that returns one output per label, by name::

    def forward(self, batch):                       # labels: click (binary), dwell (float),
        shared = self.tower(batch)                  #         topic (class, 5 classes)
        return {"click": self.click(shared),        # [B] or [B, 1] logits
                "dwell": self.dwell(shared),        # [B] or [B, 1]
                "topic": self.topic(shared)}        # [B, 5] logits

    eps.Trainer(model, heads={"click": 1.0, "dwell": eps.Head(weight=0.5)})

The batch's loss is ``sum(weight_h * loss_h)`` over the heads; each head's loss is its label
kind's default (objective.py: BCE with logits, mean squared error, cross-entropy, with per-row
weights) or its own ``Head(loss_fn=...)``, called like a trainer's ``loss_fn`` with the head's
output and its label column. ``heads`` names the labels to train (a weight, or a :class:`Head`);
without it every label is a head of weight 1. The metrics are each head's label kind's (or its
``Head(metrics=...)``), named ``<head>_<metric>``: ``click_auc``, ``dwell_rmse``,
``topic_accuracy``... next to ``cost`` (the weighted loss) and ``samples``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from elasticps.data.batch import TensorBatch
from elasticps.errors import ConfigError
from elasticps.trainer.metrics import MetricAccumulator
from elasticps.trainer.objective import LossFn, MetricsFactory, Objective, Scored, own_metrics

HEAD_KINDS = ("binary", "float", "class")


@dataclass(frozen=True)
class Head:
    """One head's ``weight`` in the loss, its own ``loss_fn`` (default: its label kind's) and
    its own ``metrics`` (default: its label kind's)."""

    weight: float = 1.0
    loss_fn: LossFn | None = None
    metrics: MetricsFactory | None = None

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, int | float) or not (
                math.isfinite(self.weight) and self.weight >= 0):
            raise ConfigError(f"a head's weight={self.weight!r} must be a finite number >= 0")


@dataclass(frozen=True)
class _Task:
    name: str
    column: int  # the label's column in Batch.label (schema order)
    head: Head
    objective: Objective


class HeadsObjective:
    """The loss and metrics of a multi-task model (see the module docstring): the same
    interface as :class:`~elasticps.trainer.objective.Objective`."""

    kind = "multi_task"
    clicks_from_label = False  # several labels: no one click per example

    def __init__(self, labels: Sequence[tuple[str, str]],
                 heads: Mapping[str, Head | float] | None = None,
                 metrics: MetricsFactory | None = None) -> None:
        kinds = dict(labels)
        chosen = dict(heads) if heads is not None else dict.fromkeys(kinds, 1.0)
        unknown = sorted(set(chosen) - set(kinds))
        if unknown:
            raise ConfigError(f"heads {unknown} name no label of the dataset; its labels: "
                              f"{list(kinds)}")
        if not chosen:
            raise ConfigError("heads={} trains nothing: name at least one label")
        columns = {name: i for i, (name, _) in enumerate(labels)}
        self.width = len(labels)
        self.tasks: list[_Task] = []
        for name, given in chosen.items():
            head = given if isinstance(given, Head) else Head(weight=given)
            if kinds[name] not in HEAD_KINDS:
                raise ConfigError(f"head {name!r}: a {kinds[name]} label cannot be a head (heads "
                                  f"are {', '.join(HEAD_KINDS)} labels)")
            self.tasks.append(_Task(name, columns[name], head,
                                    Objective(kinds[name], head.loss_fn, head.metrics)))
        self._metrics = metrics

    def _column(self, label: torch.Tensor, task: _Task) -> torch.Tensor:
        return label if label.dim() == 1 and self.width == 1 else label[:, task.column]

    def score(self, output: Any, batch: TensorBatch) -> Scored:
        """The weighted sum of the heads' losses of the model's ``{head: output}``."""
        if not isinstance(output, Mapping):
            raise ConfigError(f"a multi-task model returns {{head: output}} for the heads "
                              f"{[t.name for t in self.tasks]}; it gave a "
                              f"{type(output).__name__}")
        missing = [t.name for t in self.tasks if t.name not in output]
        if missing:
            raise ConfigError(f"the model's output has no head(s) {missing}; it has "
                              f"{sorted(map(str, output))}")
        total: torch.Tensor | None = None
        fitted: dict[str, Any] = {}
        for task in self.tasks:
            head_batch = dataclasses.replace(batch, label=self._column(batch.label, task))
            scored = task.objective.score(output[task.name], head_batch)
            fitted[task.name] = scored.output
            part = scored.loss * task.head.weight
            total = part if total is None else total + part
        assert total is not None
        return Scored(total, fitted, batch.label)

    def metrics(self, cap: int = 2_000_000) -> MetricAccumulator:
        if self._metrics is not None:
            return own_metrics(self._metrics)
        return HeadsMetrics({t.name: (t.column, t.objective) for t in self.tasks},
                            self.width, cap)


class HeadsMetrics(MetricAccumulator):
    """Each head's metrics over its outputs and label column, named ``<head>_<metric>``."""

    def __init__(self, heads: Mapping[str, tuple[int, Objective]], width: int, cap: int) -> None:
        super().__init__()
        self.width = width
        self.heads = {name: (column, objective, objective.metrics(cap))
                      for name, (column, objective) in heads.items()}

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        for name, (column, objective, metrics) in self.heads.items():
            why = metrics.misfit(output[name], self._target(label, column, objective))
            if why is not None:
                return f"head {name!r}: {why}"
        return None

    def _target(self, label: torch.Tensor, column: int, objective: Objective) -> torch.Tensor:
        single = label.dim() == 1 and self.width == 1
        return objective.target(label if single else label[:, column])

    def update(self, output: Any, label: torch.Tensor) -> None:
        for name, (column, objective, metrics) in self.heads.items():
            metrics.update(output[name], self._target(label, column, objective))

    def compute(self) -> dict[str, float]:
        return {f"{name}_{key}": value for name, (_, _, metrics) in self.heads.items()
                for key, value in metrics.compute().items()}

    def headline(self, names: Iterable[str]) -> list[str]:
        given = list(names)
        out: list[str] = []
        for name, (_, _, metrics) in self.heads.items():
            prefix = f"{name}_"
            own = [n.removeprefix(prefix) for n in given if n.startswith(prefix)]
            out += [prefix + n for n in metrics.headline(own)]
        return out
