"""What the trainer optimises and reports for a dataset's label kind.

============  ====================================  ==========================================
label kind    the model's output                    default loss
============  ====================================  ==========================================
binary        one logit per row, [B] (or [B, 1])    BCE with logits
multi_label   one logit per class, [B, classes]     BCE with logits, averaged over classes
float         one value per label, [B] or [B, L]    mean squared error
class         one logit per class, [B, classes]     cross-entropy (labels: class indices)
============  ====================================  ==========================================

For the default loss, an output with as many elements as the labels is reshaped to the labels'
shape first (so ``[B, 1]`` works for one label), and an output of another shape is refused.
Per-row weights (``Batch.weight``) scale each row's loss and the batch's loss is the mean over
rows, ``mean(w * loss_row)`` -- what PyTorch's ``BCEWithLogitsLoss(weight=w)`` computes.

A user's ``loss_fn(output, label)`` replaces the default and gets the model's output as it is,
of any shape or type (a two-tower model's ``[B, B]`` scores, a tuple...): nothing is reshaped
or checked. It receives the weights if it has a parameter named ``weight``
(``loss_fn(output, label, weight=w)``, ``w`` None for data without weights) and the whole
batch (a ``TensorBatch``) if it has one named ``batch``. Class labels reach every loss as int64
class indices. Its metrics are the label kind's while the outputs suit them, else only the loss
(``cost``); ``metrics=`` gives a model's own (metrics.py). Several heads of mixed label kinds,
each with its own loss, weight and metrics: heads.py.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.nn import functional

from elasticps.data.batch import TensorBatch
from elasticps.errors import ConfigError
from elasticps.trainer.metrics import MetricAccumulator, WhereTheyFit, metrics_for

log = logging.getLogger(__name__)

LABEL_KINDS = ("binary", "float", "multi_label", "class")

LossFn = Callable[..., torch.Tensor]
MetricsFactory = Callable[[], MetricAccumulator]


def _takes(loss_fn: LossFn, name: str) -> bool:
    """Whether ``loss_fn`` has a parameter ``name`` that can be passed by keyword."""
    target = loss_fn.forward if isinstance(loss_fn, torch.nn.Module) else loss_fn
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin without a signature: call it the plain way
        return False
    found = parameters.get(name)
    return found is not None and found.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                    inspect.Parameter.POSITIONAL_ONLY)


@dataclass
class Scored:
    """One batch through the objective: the loss to back-propagate, and the output and labels
    the metrics take (the output as the loss saw it; labels as the loss took them)."""

    loss: torch.Tensor
    output: Any
    label: torch.Tensor


class TrainingObjective(Protocol):
    """What the step runner and evaluation ask of an objective: one label kind's
    (:class:`Objective`) or a multi-task model's (heads.py)."""

    @property
    def kind(self) -> str: ...

    @property
    def clicks_from_label(self) -> bool: ...

    def score(self, output: Any, batch: TensorBatch) -> Scored: ...

    def metrics(self, cap: int = 2_000_000) -> MetricAccumulator: ...


def own_metrics(factory: MetricsFactory) -> MetricAccumulator:
    """A fresh accumulator from a model's ``metrics=`` factory, checked."""
    made = factory()
    if not isinstance(made, MetricAccumulator):
        raise ConfigError(f"metrics={factory!r} made {made!r}, not an "
                          "elasticps.metrics.MetricAccumulator")
    return made


class Objective:
    """The loss and the metrics of one label kind (see the module docstring)."""

    def __init__(self, kind: str, loss_fn: LossFn | None = None,
                 metrics: MetricsFactory | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        if kind not in LABEL_KINDS:
            raise ConfigError(f"label kind {kind!r} is not one of {', '.join(LABEL_KINDS)}")
        self.kind = kind
        self.label_names = None if label_names is None else tuple(label_names)
        self.custom = loss_fn
        self._custom_weights = loss_fn is not None and _takes(loss_fn, "weight")
        self._custom_batch = loss_fn is not None and _takes(loss_fn, "batch")
        self._metrics = metrics
        self._warned = False

    @property
    def clicks_from_label(self) -> bool:
        """Whether the labels are 0/1 clicks (show/click counts of SCORE tables)."""
        return self.kind == "binary"

    def score(self, output: Any, batch: TensorBatch) -> Scored:
        """The loss of the model's ``output`` for ``batch``."""
        label = self.target(batch.label)
        if self.custom is None:
            output = self.fit_output(output, label)
            return Scored(self._default(output, label, batch.weight), output, label)
        return Scored(self._call_custom(output, label, batch), output, label)

    def target(self, label: torch.Tensor) -> torch.Tensor:
        """The labels as the loss takes them: class indices as int64, the rest as they are."""
        return label.reshape(-1).long() if self.kind == "class" else label

    def fit_output(self, output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """The model's output shaped like the labels, where it has one value per entry."""
        if self.kind != "class" and output.shape != label.shape and (
                output.numel() == label.numel()):
            return output.reshape(label.shape)
        return output

    def loss(self, output: torch.Tensor, target: torch.Tensor,
             weight: torch.Tensor | None) -> torch.Tensor:
        """The loss of an output already fitted to ``target`` (:meth:`fit_output`)."""
        if self.custom is not None:
            return self._call_custom(output, target, None, weight)
        return self._default(output, target, weight)

    def _call_custom(self, output: Any, target: torch.Tensor, batch: TensorBatch | None,
                     weight: torch.Tensor | None = None) -> torch.Tensor:
        assert self.custom is not None
        if batch is not None:
            weight = batch.weight
        kwargs: dict[str, Any] = {}
        if self._custom_batch:
            kwargs["batch"] = batch
        if self._custom_weights:
            kwargs["weight"] = weight
        elif weight is not None and not self._warned:
            self._warned = True
            log.warning("The batches carry per-row weights but loss_fn takes no 'weight' "
                        "parameter, so they are ignored (see docs/trainer.md, Losses).")
        return self.custom(output, target, **kwargs)

    def _default(self, output: torch.Tensor, target: torch.Tensor,
                 weight: torch.Tensor | None) -> torch.Tensor:
        if self.kind == "class":
            if output.dim() != 2 or output.shape[0] != target.shape[0]:
                raise ConfigError(f"class labels need [B, classes] logits; the model gave "
                                  f"{tuple(output.shape)} for {target.shape[0]} rows")
            if weight is None:
                return functional.cross_entropy(output, target)
            return (functional.cross_entropy(output, target, reduction="none") * weight).mean()
        if output.shape != target.shape:
            raise ConfigError(f"{self.kind} labels of shape {tuple(target.shape)} need an output "
                              f"of that shape; the model gave {tuple(output.shape)}")
        if weight is not None and target.dim() == 2:
            weight = weight.unsqueeze(1)  # one weight per row, for every label of the row
        if self.kind == "float":
            squared = (output - target).square()
            return squared.mean() if weight is None else (squared * weight).mean()
        return functional.binary_cross_entropy_with_logits(output, target, weight=weight)

    def metrics(self, cap: int = 2_000_000) -> MetricAccumulator:
        """A fresh accumulator for a pass: the model's own (``metrics=``), else the label
        kind's (for a user's loss, while its outputs suit them)."""
        if self._metrics is not None:
            return own_metrics(self._metrics)
        kind_metrics = metrics_for(self.kind, cap, self.label_names)
        return kind_metrics if self.custom is None else WhereTheyFit(kind_metrics)
