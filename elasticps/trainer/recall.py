"""Retrieval metrics over a batch's candidates: ``elasticps.metrics.InBatchRecall``.

A two-tower model scores each row's query against the batch's items: its output is
``[B, C]`` scores (``C >= B``), row ``i``'s positive is column ``i`` (its own item) and every
other column is a negative (the other rows' items, then any sampled negatives). Recall@k is
the fraction of rows whose positive ranks among the row's ``k`` highest scores; a tie with a
negative counts against it (the positive's rank is the number of candidates scoring at least
as high, itself excluded). The figures depend on the candidates: ``B - 1`` in-batch negatives
(plus the sampled ones), so compare runs of the same batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from elasticps.errors import ConfigError
from elasticps.trainer.metrics import MetricAccumulator


class InBatchRecall(MetricAccumulator):
    """``recall_at_<k>`` for each ``k`` in ``ks``, and ``mean_rank`` (0 = ranked first), of
    ``[B, C]`` scores whose positive for row ``i`` is column ``i``."""

    def __init__(self, ks: Sequence[int] = (1, 10)) -> None:
        super().__init__()
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise ConfigError(f"recall ks={list(ks)!r} must be integers >= 1")
        self.ks = tuple(sorted(set(ks)))
        self._hits = dict.fromkeys(self.ks, 0)
        self._rank_sum = 0
        self._rows = 0

    def misfit(self, output: Any, label: torch.Tensor) -> str | None:
        rows = int(label.shape[0])
        if not isinstance(output, torch.Tensor) or output.dim() != 2 or (
                output.shape[0] != rows or output.shape[1] < rows):
            shape = tuple(output.shape) if isinstance(output, torch.Tensor) \
                else type(output).__name__
            return (f"in-batch recall needs [B, C >= B] scores with row i's positive in column "
                    f"i: the model gave {shape} for {rows} rows")
        return None

    def update(self, output: torch.Tensor, label: torch.Tensor) -> None:
        scores = output.double()
        positive = scores.diagonal().unsqueeze(1)
        # Candidates scoring at least as high as the positive, the positive itself left out.
        ranks = (scores >= positive).sum(dim=1) - 1
        for k in self.ks:
            self._hits[k] += int((ranks < k).sum())
        self._rank_sum += int(ranks.sum())
        self._rows += int(ranks.shape[0])

    def compute(self) -> dict[str, float]:
        if not self._rows:
            return {}
        out = {f"recall_at_{k}": self._hits[k] / self._rows for k in self.ks}
        out["mean_rank"] = self._rank_sum / self._rows
        return out
