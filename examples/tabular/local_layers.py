"""Local (one-process) versions of the sparse lookups: the reference run and the scorer.

They read the same batch fields as elasticps' layers (``batch.ids[column]``,
``batch.bags[column]``) and import nothing from elasticps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class LocalEmbedding(nn.Module):
    """A local table read by several single-valued columns: batch -> [B, len(columns), dim]."""

    def __init__(self, table: nn.Embedding, columns: Sequence[str]) -> None:
        super().__init__()
        self.table = table
        self.columns = tuple(columns)

    def forward(self, batch: object) -> torch.Tensor:
        ids = torch.stack([batch.ids[c] for c in self.columns], dim=1)  # type: ignore[attr-defined]
        return self.table(ids)


class LocalBag(nn.Module):
    """A local table read by one multi-valued column: batch -> [B, dim] (``mode`` over values)."""

    def __init__(self, table: nn.Embedding, column: str, mode: str) -> None:
        super().__init__()
        self.table = table
        self.column = column
        self.mode = mode

    def forward(self, batch: object) -> torch.Tensor:
        bag = batch.bags[self.column]  # type: ignore[attr-defined]
        return nn.functional.embedding_bag(bag.values, self.table.weight, bag.offsets[:-1],
                                           mode=self.mode, include_last_offset=False)


class LocalTables:
    """Factories for models.TabularModel that share one ``nn.Embedding`` per table name."""

    def __init__(self, init: float = 0.01, seed: int = 0) -> None:
        self.tables: dict[str, nn.Embedding] = {}
        self.init = init
        self.generator = torch.Generator().manual_seed(seed)

    def table(self, name: str, id_space: int, dim: int) -> nn.Embedding:
        if name not in self.tables:
            emb = nn.Embedding(id_space, dim)
            with torch.no_grad():
                emb.weight.uniform_(-self.init, self.init, generator=self.generator)
            self.tables[name] = emb
        return self.tables[name]

    def embedding(self, name: str, id_space: int, dim: int,
                  columns: Sequence[str]) -> nn.Module:
        return LocalEmbedding(self.table(name, id_space, dim), columns)

    def bag(self, name: str, id_space: int, dim: int, column: str, mode: str) -> nn.Module:
        return LocalBag(self.table(name, id_space, dim), column, mode)
