"""CTR models of the demo, in plain PyTorch.

The sparse lookup is injected (``make_embedding(table, dim, columns) -> nn.Module``), so the
same classes train with ``elasticps.nn.SparseEmbedding`` (rows on the pservers) and score with
a plain lookup built from an exported model (``score.py``), without importing elasticps.

Input: a batch in the Criteo layout (``batch.dense`` float32 [B, 13]; ``batch.ids`` one int64
[B] id column per slot, ``C1`` .. ``C26``), which the embedding reads itself: given the 26
columns it returns [B, 26, dim]. Output: logits [B].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

NUM_DENSE = 13
NUM_SLOTS = 26
SLOTS = tuple(f"C{i}" for i in range(1, NUM_SLOTS + 1))  # the batch's id columns

# (table, dim, columns) -> a module that, called with a batch, looks up those columns: [B, k, dim]
MakeEmbedding = Callable[[str, int, Sequence[str]], nn.Module]


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CtrDnn(nn.Module):
    """The classic CTR-DNN (PaddleRec ``dnn``): 26 slots into one table of dim 10, concatenated
    with the 13 dense features, three 400-unit ReLU layers, one logistic output."""

    def __init__(self, make_embedding: MakeEmbedding, *, embedding_dim: int = 10,
                 hidden: Sequence[int] = (400, 400, 400), table: str = "embedding") -> None:
        super().__init__()
        self.embedding = make_embedding(table, embedding_dim, SLOTS)
        self.mlp = mlp([NUM_DENSE + NUM_SLOTS * embedding_dim, *hidden, 1])

    def forward(self, batch: Any) -> torch.Tensor:
        emb = self.embedding(batch).flatten(1)
        return self.mlp(torch.cat([batch.dense, emb], dim=1)).squeeze(1)


class WideDeep(nn.Module):
    """Wide & Deep (Cheng et al. 2016): a linear model over the dense features and one weight per
    sparse id (table ``wide``, dim 1), plus the CTR-DNN tower; the logits add up."""

    def __init__(self, make_embedding: MakeEmbedding, *, embedding_dim: int = 10,
                 hidden: Sequence[int] = (400, 400, 400), table: str = "embedding") -> None:
        super().__init__()
        self.deep = CtrDnn(make_embedding, embedding_dim=embedding_dim, hidden=hidden, table=table)
        self.wide_sparse = make_embedding("wide", 1, SLOTS)
        self.wide_dense = nn.Linear(NUM_DENSE, 1)

    def forward(self, batch: Any) -> torch.Tensor:
        wide = self.wide_sparse(batch).sum(dim=(1, 2)) + self.wide_dense(batch.dense).squeeze(1)
        return wide + self.deep(batch)


class DeepFM(nn.Module):
    """DeepFM (Guo et al. 2017): first-order weights (table ``wide``, dim 1, plus a linear map of
    the dense features), a factorization machine over the 26 slot embeddings (pairwise dot
    products, which learn feature crosses), and the CTR-DNN tower on the same embeddings."""

    def __init__(self, make_embedding: MakeEmbedding, *, embedding_dim: int = 10,
                 hidden: Sequence[int] = (400, 400, 400), table: str = "embedding") -> None:
        super().__init__()
        self.embedding = make_embedding(table, embedding_dim, SLOTS)
        self.first_order = make_embedding("wide", 1, SLOTS)
        self.dense_linear = nn.Linear(NUM_DENSE, 1)
        self.mlp = mlp([NUM_DENSE + NUM_SLOTS * embedding_dim, *hidden, 1])

    def forward(self, batch: Any) -> torch.Tensor:
        dense = batch.dense
        emb = self.embedding(batch)  # [B, 26, dim]
        first = self.first_order(batch).sum(dim=(1, 2)) + self.dense_linear(dense).squeeze(1)
        fm = 0.5 * (emb.sum(dim=1).pow(2) - emb.pow(2).sum(dim=1)).sum(dim=1)
        deep = self.mlp(torch.cat([dense, emb.flatten(1)], dim=1)).squeeze(1)
        return first + fm + deep


MODELS: dict[str, type[nn.Module]] = {"dnn": CtrDnn, "wide_deep": WideDeep, "deepfm": DeepFM}


def build(name: str, make_embedding: MakeEmbedding, *, embedding_dim: int = 10,
          hidden: Sequence[int] = (400, 400, 400)) -> nn.Module:
    """The model called ``name`` (``dnn``, ``wide_deep`` or ``deepfm``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name](make_embedding, embedding_dim=embedding_dim, hidden=hidden)
