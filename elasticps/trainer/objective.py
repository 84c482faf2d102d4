"""What the trainer optimises and reports for a dataset's label kind.

============  ====================================  ==========================================
label kind    the model's output                    default loss
============  ====================================  ==========================================
binary        one logit per row, [B] (or [B, 1])    BCE with logits
multi_label   one logit per class, [B, classes]     BCE with logits, averaged over classes
float         one value per label, [B] or [B, L]    mean squared error
class         one logit per class, [B, classes]     cross-entropy (labels: class indices)
============  ====================================  ==========================================

An output with as many elements as the labels is reshaped to the labels' shape first (so
``[B, 1]`` works for one label). Per-row weights (``Batch.weight``) scale each row's loss and
the batch's loss is the mean over rows, ``mean(w * loss_row)`` -- what PyTorch's
``BCEWithLogitsLoss(weight=w)`` computes. A user's ``loss_fn(output, label)`` replaces the
default; it receives the weights only if it has a parameter named ``weight``
(``loss_fn(output, label, weight=w)``, ``w`` None for data without weights). Class labels reach
every loss as int64 class indices.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence

import torch
from torch.nn import functional

from elasticps.errors import ConfigError
from elasticps.trainer.metrics import MetricAccumulator, metrics_for

log = logging.getLogger(__name__)

LABEL_KINDS = ("binary", "float", "multi_label", "class")

LossFn = Callable[..., torch.Tensor]


def _takes_weight(loss_fn: LossFn) -> bool:
    target = loss_fn.forward if isinstance(loss_fn, torch.nn.Module) else loss_fn
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin without a signature: call it the plain way
        return False
    weight = parameters.get("weight")
    return weight is not None and weight.kind is not inspect.Parameter.VAR_POSITIONAL


class Objective:
    """The loss and the metrics of one label kind (see the module docstring)."""

    def __init__(self, kind: str, loss_fn: LossFn | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        if kind not in LABEL_KINDS:
            raise ConfigError(f"label kind {kind!r} is not one of {', '.join(LABEL_KINDS)}")
        self.kind = kind
        self.label_names = None if label_names is None else tuple(label_names)
        self.custom = loss_fn
        self._custom_weights = loss_fn is not None and _takes_weight(loss_fn)
        self._warned = False

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
        if self.custom is not None:
            if self._custom_weights:
                return self.custom(output, target, weight=weight)
            if weight is not None and not self._warned:
                self._warned = True
                log.warning("The batches carry per-row weights but loss_fn takes no 'weight' "
                            "parameter, so they are ignored (see docs/trainer.md, Losses).")
            return self.custom(output, target)
        return self._default(output, target, weight)

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
        return metrics_for(self.kind, cap, self.label_names)
