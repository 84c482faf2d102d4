"""Pass metrics by label kind, over what a trainer trained (or evaluated) in a pass.

============  =========================================================================
label kind    metrics (besides ``cost``, the mean loss, and ``samples``)
============  =========================================================================
binary        ``auc`` (exact, the data layer's), ``logloss``; several binary labels: each
              one's ``auc_<label>`` and ``logloss_<label>``, ``auc`` their mean (macro, over
              the labels with both values in the data seen), ``logloss`` over every entry
float         ``rmse``, ``mae`` over every label entry; several float labels also each one's
              ``rmse_<label>``, ``mae_<label>``
multi_label   ``auc``: macro AUC over the classes that have both labels in the data seen;
              ``logloss``: mean binary cross-entropy over every (row, class)
class         ``accuracy`` (top-1), ``cross_entropy`` (mean -log p of the label, nats),
              ``perplexity`` = exp(cross_entropy)
============  =========================================================================

Each accumulator takes the model's output and the labels of a batch as tensors and keeps only
what its metrics need: sums for the streaming metrics, and, for AUC, the scores of the most
recent ``cap`` rows (AUC needs them all; a pass of a few million rows fits). Labels are named
by the schema (``names``); per-label metrics are kept for the first ``PER_LABEL_LIMIT`` labels.

A user's own metrics subclass :class:`MetricAccumulator` (``elasticps.metrics``): ``update``
gets each batch's output as the model gave it (on the host, detached: a tensor, or a tuple,
list or dict of them) and the labels; ``compute`` returns the pass's figures by name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from elasticps.data.auc import auc
from elasticps.errors import ConfigError, DataError

log = logging.getLogger(__name__)

PER_LABEL_LIMIT = 16  # labels that get metrics of their own (each adds two per pass)

LOGLOSS_EPS = 1e-7  # probabilities are clipped to [eps, 1 - eps], as data.auc.log_loss does


def _safe(metric: Callable[[np.ndarray, np.ndarray], float], labels: np.ndarray,
          scores: np.ndarray) -> float:
    try:
        return float(metric(labels, scores))
    except DataError:  # NaN predictions (a diverged model): report NaN, do not crash training
        return math.nan


def to_host(output: Any) -> Any:
    """``output`` detached and on the host: a tensor, or a tuple, list or dict of them."""
    if isinstance(output, torch.Tensor):
        return output.detach().cpu()
    if isinstance(output, dict):
        return {key: to_host(value) for key, value in output.items()}
    if isinstance(output, tuple | list):
        return type(output)(to_host(value) for value in output)
    return output


class MetricAccumulator:
    """A pass's metrics, batch by batch. Every accumulator counts the rows seen (``samples``)
    and averages the loss over them (``cost``); a subclass adds its figures:

    - ``update(output, label)``: one batch's output (as the model gave it, on the host) and
      labels (class labels as int64 indices);
    - ``compute() -> {name: value}``: the figures over every batch so far;
    - ``misfit(output, label) -> str | None``: why an output does not suit these metrics
      (None: it does), checked before ``update``.
    """

    def __init__(self) -> None:
        self.samples = 0
        self.loss_sum = 0.0

    def add(self, output: Any, label: torch.Tensor, loss: float) -> None:
        rows = int(label.shape[0])
        self.samples += rows
        self.loss_sum += loss * rows
        if rows:
            # the host: outputs of a CUDA model come back here, once per batch
            output, label = to_host(output), label.detach().cpu()
            why = self.misfit(output, label)
            if why is not None:
                raise ConfigError(why)
            self.update(output, label)

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        return None

    def update(self, output: Any, label: torch.Tensor) -> None:
        """Take one batch (see the class docstring); the base class keeps only the loss."""

    def compute(self) -> dict[str, float]:
        return {}

    def headline(self, names: Iterable[str]) -> list[str]:
        """Of the figures ``compute`` gave (``names``), those a job's final line shows
        (default: all of them)."""
        return list(names)

    def result(self) -> dict[str, float]:
        if not self.samples:
            return {"samples": 0.0}
        return {**self.compute(), "cost": self.loss_sum / self.samples,
                "samples": float(self.samples)}


class WhereTheyFit(MetricAccumulator):
    """A label kind's metrics for a user's loss, whose output may be anything: the kind's
    metrics while the outputs suit them, else only ``cost`` (logged once, naming why)."""

    def __init__(self, inner: MetricAccumulator) -> None:
        super().__init__()
        self.inner: MetricAccumulator | None = inner

    def update(self, output: Any, label: torch.Tensor) -> None:
        if self.inner is None:
            return
        why = self.inner.misfit(output, label)
        if why is not None:
            log.info("The trainer reports only the loss (cost): %s. A model whose output is not "
                     "one prediction per label entry gives its own metrics: "
                     "Trainer(metrics=...), see docs/trainer.md.", why)
            self.inner = None
            return
        self.inner.update(output, label)

    def compute(self) -> dict[str, float]:
        return {} if self.inner is None else self.inner.compute()

    def headline(self, names: Iterable[str]) -> list[str]:
        return [] if self.inner is None else self.inner.headline(names)


class _Scores:
    """The most recent ``cap`` rows of (labels, scores), for AUC."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._labels: list[np.ndarray] = []
        self._scores: list[np.ndarray] = []
        self._rows = 0

    def add(self, labels: np.ndarray, scores: np.ndarray) -> None:
        self._labels.append(labels)
        self._scores.append(scores)
        self._rows += labels.shape[0]
        while self._rows - self._labels[0].shape[0] >= self.cap:
            self._rows -= self._labels.pop(0).shape[0]
            self._scores.pop(0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self._labels), np.concatenate(self._scores)


def _one_per_entry(output: Any, label: torch.Tensor, kind: str, what: str) -> str | None:
    if not isinstance(output, torch.Tensor):
        return f"a {kind} label needs a tensor of {what}s: the model gave a {type(output).__name__}"
    if output.numel() != label.numel():
        return (f"a {kind} label needs one {what} per label entry: the model gave "
                f"{tuple(output.shape)} for labels {tuple(label.shape)}")
    return None


def _probs(output: torch.Tensor, label: torch.Tensor) -> np.ndarray:
    return torch.sigmoid(output.reshape(label.shape).float()).numpy().copy()


def _label_names(names: Sequence[str] | None, width: int) -> list[str]:
    """The names of ``width`` labels: the schema's, else ``label0``, ``label1``..."""
    if names is not None and len(names) == width:
        return list(names)
    return [f"label{k}" for k in range(width)]


def _macro_auc(labels: np.ndarray, probs: np.ndarray) -> list[float]:
    """Each column's AUC; NaN for a column without both labels."""
    aucs = []
    for c in range(labels.shape[1]):
        positives = int(labels[:, c].sum())
        present = 0 < positives < labels.shape[0]
        aucs.append(_safe(auc, labels[:, c], probs[:, c]) if present else math.nan)
    return aucs


def _mean_of_finite(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _logloss_columns(labels: np.ndarray, probs: np.ndarray) -> np.ndarray:
    p = np.clip(probs.astype(np.float64), LOGLOSS_EPS, 1.0 - LOGLOSS_EPS)
    return np.asarray(-np.sum(np.where(labels == 1, np.log(p), np.log1p(-p)), axis=0))


class BinaryMetrics(MetricAccumulator):
    """``auc`` over the most recent ``cap`` rows, ``logloss`` over all of them; with several
    labels, each one's too, and ``auc`` their macro mean."""

    kind = "binary"

    def __init__(self, cap: int = 2_000_000, names: Sequence[str] | None = None) -> None:
        super().__init__()
        self._scores = _Scores(cap)
        self._names = names
        self._logloss: np.ndarray | None = None  # per label entry column
        self._rows = 0

    def headline(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name == "auc"]

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        return _one_per_entry(output, label, self.kind, "logit")

    def update(self, output: torch.Tensor, label: torch.Tensor) -> None:
        labels = label.numpy().reshape(label.shape[0], -1).astype(np.float32, copy=True)
        probs = _probs(output, label).reshape(labels.shape)
        self._scores.add(labels, probs)
        sums = _logloss_columns(labels, probs)
        self._logloss = sums if self._logloss is None else self._logloss + sums
        self._rows += labels.shape[0]

    def compute(self) -> dict[str, float]:
        if not self._rows:
            return {}
        labels, probs = self._scores.arrays()
        logloss = self._logloss if self._logloss is not None else np.zeros(1)
        if labels.shape[1] == 1:
            return {"auc": _safe(auc, labels[:, 0], probs[:, 0]),
                    "logloss": float(logloss[0]) / self._rows}
        aucs = _macro_auc(labels, probs)
        out = {"auc": _mean_of_finite(aucs), "logloss": float(logloss.sum()) / logloss.size
               / self._rows}
        names = _label_names(self._names, labels.shape[1])
        for k, name in enumerate(names[:PER_LABEL_LIMIT]):
            out[f"auc_{name}"] = aucs[k]
            out[f"logloss_{name}"] = float(logloss[k]) / self._rows
        return out


class MultiLabelMetrics(BinaryMetrics):
    """Macro ``auc`` over the classes with both labels present; ``logloss`` over every entry."""

    kind = "multi_label"

    def compute(self) -> dict[str, float]:
        if not self._rows:
            return {}
        labels, probs = self._scores.arrays()
        logloss = self._logloss if self._logloss is not None else np.zeros(1)
        return {"auc": _mean_of_finite(_macro_auc(labels, probs)),
                "logloss": float(logloss.sum()) / logloss.size / self._rows}


class RegressionMetrics(MetricAccumulator):
    """``rmse`` and ``mae`` over every label entry; with several labels, each one's too."""

    def __init__(self, names: Sequence[str] | None = None) -> None:
        super().__init__()
        self._names = names
        self._squared: np.ndarray | None = None  # per label column
        self._absolute: np.ndarray | None = None
        self._rows = 0

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        return _one_per_entry(output, label, "float", "prediction")

    def update(self, output: torch.Tensor, label: torch.Tensor) -> None:
        error = (output.reshape(label.shape).double() - label.double()).reshape(
            label.shape[0], -1).numpy()
        squared, absolute = np.square(error).sum(axis=0), np.abs(error).sum(axis=0)
        self._squared = squared if self._squared is None else self._squared + squared
        self._absolute = absolute if self._absolute is None else self._absolute + absolute
        self._rows += label.shape[0]

    def compute(self) -> dict[str, float]:
        if self._squared is None or self._absolute is None or not self._rows:
            return {}
        entries = self._rows * self._squared.size
        out = {"rmse": math.sqrt(float(self._squared.sum()) / entries),
               "mae": float(self._absolute.sum()) / entries}
        if self._squared.size > 1:
            names = _label_names(self._names, self._squared.size)
            for k, name in enumerate(names[:PER_LABEL_LIMIT]):
                out[f"rmse_{name}"] = math.sqrt(float(self._squared[k]) / self._rows)
                out[f"mae_{name}"] = float(self._absolute[k]) / self._rows
        return out

    def headline(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name == "rmse"]


class ClassMetrics(MetricAccumulator):
    """``accuracy``, ``cross_entropy`` and ``perplexity`` of a [B, classes] output."""

    def __init__(self) -> None:
        super().__init__()
        self._correct = 0
        self._nll = 0.0
        self._rows = 0

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        if not isinstance(output, torch.Tensor) or output.dim() != 2 or (
                output.shape[0] != label.reshape(-1).shape[0]):
            shape = tuple(output.shape) if isinstance(output, torch.Tensor) \
                else type(output).__name__
            return (f"a class label needs [B, classes] logits: the model gave {shape} for "
                    f"{label.reshape(-1).shape[0]} rows")
        return None

    def update(self, output: torch.Tensor, label: torch.Tensor) -> None:
        target = label.reshape(-1).long()
        log_probs = torch.log_softmax(output.double(), dim=1)
        self._nll -= float(log_probs.gather(1, target.unsqueeze(1)).sum())
        self._correct += int((output.argmax(dim=1) == target).sum())
        self._rows += int(target.shape[0])

    def compute(self) -> dict[str, float]:
        if not self._rows:
            return {}
        cross_entropy = self._nll / self._rows
        return {"accuracy": self._correct / self._rows, "cross_entropy": cross_entropy,
                "perplexity": math.exp(cross_entropy) if cross_entropy < 700 else math.inf}

    def headline(self, names: Iterable[str]) -> list[str]:
        return [name for name in names if name in ("accuracy", "perplexity")]


def metrics_for(kind: str, cap: int = 2_000_000,
                names: Sequence[str] | None = None) -> MetricAccumulator:
    """A fresh accumulator for labels of ``kind`` (binary, float, multi_label, class), named
    ``names`` (the schema's label columns, for per-label metrics)."""
    if kind == "binary":
        return BinaryMetrics(cap, names)
    if kind == "multi_label":
        return MultiLabelMetrics(cap)
    if kind == "float":
        return RegressionMetrics(names)
    if kind == "class":
        return ClassMetrics()
    raise ConfigError(f"label kind {kind!r} is not binary, float, multi_label or class")
