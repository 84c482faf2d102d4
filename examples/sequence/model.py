"""Attention over a user's history, in plain PyTorch: the candidate item is the query, the
history's items (one embedding per position, padded, with a mask) the keys and values.

::

    history  [B, L, dim] + mask [B, L]     (elasticps.nn.SparseEmbeddingSequence)
    candidate [B, dim]                     (elasticps.nn.SparseEmbedding, same table)
    weights = softmax over the real positions of (K(history) . Q(candidate)) / sqrt(dim)
    pooled  = sum of weights * history                                       [B, dim]
    logit   = MLP([candidate, pooled, candidate * pooled])                   [B, 1]

A row's padding positions get no weight; a row with an empty history pools zeros. The lookups
are injected (``make_sequence(table, id_space, dim, column, max_len)`` -> (values, mask), and
``make_embedding(table, id_space, dim, column)``), so the same class trains with elasticps'
layers and runs with local tables (``examples/tabular/local_layers.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

MakeSequence = Callable[[str, int, int, str, int], nn.Module]
MakeEmbedding = Callable[[str, int, int, str], nn.Module]


class HistoryAttention(nn.Module):
    def __init__(self, items: tuple[int, int], make_sequence: MakeSequence,
                 make_embedding: MakeEmbedding, *, max_len: int = 20, hidden: int = 32) -> None:
        super().__init__()
        id_space, dim = items
        self.history = make_sequence("items", id_space, dim, "history", max_len)
        self.candidate = make_embedding("items", id_space, dim, "candidate")
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(3 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, batch: Any) -> torch.Tensor:
        values, mask = self.history(batch)  # [B, L, dim], [B, L]
        candidate = self.candidate(batch)  # [B, dim]
        scores = (self.key(values) @ self.query(candidate).unsqueeze(2)).squeeze(2) * self.scale
        weights = torch.softmax(scores.masked_fill(~mask, -1e4), dim=1) * mask
        pooled = (weights.unsqueeze(2) * values).sum(dim=1)
        return self.mlp(torch.cat([candidate, pooled, candidate * pooled], dim=1))
