"""A two-tower retriever in plain PyTorch: a user tower and an item tower, scored against every
item of the batch (in-batch negatives) and, in training, against sampled items.

Each tower is an embedding of the id (rows on the pservers, or a local table) and a small MLP;
the two outputs are L2-normalised, so a score is a cosine over ``temperature``. The model's
output is ``[B, B + negatives]`` scores: row ``i``'s positive is column ``i`` (its own item),
the other columns are the batch's other items and then ``negatives`` items drawn uniformly
from the item table, the same for every row of the batch. The draw is seeded by the batch's
items, so any run of the same batches samples the same negatives. The loss is the softmax over
a row's candidates (:func:`in_batch_softmax`); the metric, recall@k among them
(``elasticps.metrics.InBatchRecall``).

The lookups are injected (``make_embedding(table, id_space, dim, column)`` -> a module that
takes a batch, or an id tensor), so the same class trains with ``elasticps.nn.SparseEmbedding``
and runs with local tables (``examples/tabular/local_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

MakeEmbedding = Callable[[str, int, int, str], nn.Module]


def tower(dim: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out))


def in_batch_softmax(scores: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each row's own item (column i) against its other candidates."""
    return functional.cross_entropy(scores, torch.arange(scores.shape[0], device=scores.device))


class TwoTower(nn.Module):
    def __init__(self, tables: dict[str, tuple[int, int]], make_embedding: MakeEmbedding, *,
                 hidden: int = 32, out: int = 16, negatives: int = 0,
                 temperature: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        (users, user_dim), (items, item_dim) = tables["users"], tables["items"]
        self.items = items
        self.user_embedding = make_embedding("users", users, user_dim, "user")
        self.item_embedding = make_embedding("items", items, item_dim, "item")
        self.user_tower = tower(user_dim, hidden, out)
        self.item_tower = tower(item_dim, hidden, out)
        self.negatives, self.temperature, self.seed = negatives, temperature, seed

    def sampled_items(self, batch: Any) -> torch.Tensor:
        """``negatives`` item ids, drawn with a generator seeded by the batch's items."""
        generator = torch.Generator().manual_seed(
            self.seed * 1_000_003 + int(batch.ids["item"].sum()))
        return torch.randint(0, self.items, (self.negatives,), generator=generator)

    def forward(self, batch: Any) -> torch.Tensor:
        users = functional.normalize(self.user_tower(self.user_embedding(batch)), dim=-1)
        items = self.item_embedding(batch)
        if self.training and self.negatives:
            sampled = self.item_embedding(self.sampled_items(batch).to(items.device))
            items = torch.cat([items, sampled])
        items = functional.normalize(self.item_tower(items), dim=-1)
        return users @ items.T / self.temperature  # [B, B + negatives]
