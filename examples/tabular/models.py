"""Models built from a dataset's schema, in plain PyTorch.

The sparse lookups are injected, so the same classes train with elasticps' layers (rows on the
pservers) and run with local ones (:mod:`local_layers`: the one-process reference and the
scorer of an exported model)::

    make_embedding(table, id_space, dim, columns) -> module: batch -> [B, len(columns), dim]
    make_bag(table, id_space, dim, column, mode)  -> module: batch -> [B, dim]

One lookup per table reads that table's single-valued columns; one bag per multi-valued or
text column (mean of its values' or words' rows). The dense columns (normalised by the reader)
and the dense_vector columns (``batch.vectors``, as stored) go into the MLP as they are. The
output has one logit per label entry (``Schema.label_width``; for a ``class`` label, one per
class).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from elasticps.data.schema import Schema

MakeEmbedding = Callable[[str, int, int, Sequence[str]], nn.Module]
MakeBag = Callable[[str, int, int, str, str], nn.Module]
KINDS = ("dnn", "wide_deep", "deepfm")
BAGGED = ("multi_categorical", "text")  # column kinds read as a mean bag of rows


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def output_width(schema: Schema) -> int:
    return int(schema.num_classes or 0) if schema.label_kind == "class" else schema.label_width


class Fields(nn.Module):
    """Every categorical column's embedding: a list of [B, dim] fields, in schema order."""

    def __init__(self, schema: Schema, make_embedding: MakeEmbedding, make_bag: MakeBag, *,
                 suffix: str = "", dim: int | None = None) -> None:
        super().__init__()
        self.lookups = nn.ModuleList()
        self.dims: list[int] = []
        for name, table in schema.tables.items():
            width = dim or table.dim
            single = [c.name for c in schema.columns_of(name) if c.kind == "categorical"]
            if single:
                self.lookups.append(make_embedding(name + suffix, table.id_space, width, single))
                self.dims += [width] * len(single)
            for column in schema.columns_of(name):
                if column.kind in BAGGED:
                    self.lookups.append(make_bag(name + suffix, table.id_space, width,
                                                 column.name, "mean"))
                    self.dims.append(width)

    def forward(self, batch: object) -> list[torch.Tensor]:
        fields: list[torch.Tensor] = []
        for lookup in self.lookups:
            out = lookup(batch)
            fields.extend(out.unbind(1) if out.dim() == 3 else [out])
        return fields


class TabularModel(nn.Module):
    """``dnn``: fields, dense columns and vectors into an MLP. ``wide_deep`` adds a linear part
    (one weight per id, a table ``<table>_wide`` of dim 1, and a linear map of the dense columns
    and vectors).
    ``deepfm`` adds that linear part and a factorization machine over the fields (pairwise dot
    products; every table must have the same dim)."""

    def __init__(self, schema: Schema, make_embedding: MakeEmbedding, make_bag: MakeBag, *,
                 kind: str = "dnn", hidden: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown model {kind!r}; choose one of {', '.join(KINDS)}")
        self.kind = kind
        self.width = output_width(schema)
        self.vectors = tuple(c.name for c in schema.vector_columns)
        dense = len(schema.dense_columns) + sum(int(c.length or 0) for c in schema.vector_columns)
        self.fields = Fields(schema, make_embedding, make_bag)
        if kind == "deepfm" and len(set(self.fields.dims)) > 1:
            raise ValueError(f"deepfm needs one embedding dim for every table, got "
                             f"{sorted(set(self.fields.dims))}; use dnn or wide_deep")
        self.deep = mlp([dense + sum(self.fields.dims), *hidden, self.width])
        if kind != "dnn":
            self.wide = Fields(schema, make_embedding, make_bag, suffix="_wide", dim=1)
            self.wide_dense = nn.Linear(dense, self.width) if dense else None

    def continuous(self, batch: object) -> torch.Tensor:
        """The dense columns and the vectors side by side: [B, dense + sum of lengths]."""
        dense: torch.Tensor = batch.dense  # type: ignore[attr-defined]
        if not self.vectors:
            return dense
        vectors = batch.vectors  # type: ignore[attr-defined]
        return torch.cat([dense, *(vectors[name] for name in self.vectors)], dim=1)

    def forward(self, batch: object) -> torch.Tensor:
        dense = self.continuous(batch)
        fields = self.fields(batch)
        out = self.deep(torch.cat([dense, *fields], dim=1))
        if self.kind != "dnn":
            out = out + torch.stack(self.wide(batch), dim=1).sum(dim=1)
            if self.wide_dense is not None:
                out = out + self.wide_dense(dense)
        if self.kind == "deepfm":
            stacked = torch.stack(fields, dim=1)  # [B, F, dim]
            fm = 0.5 * (stacked.sum(dim=1).pow(2) - stacked.pow(2).sum(dim=1)).sum(dim=1)
            out = out + fm.unsqueeze(1)
        return out.squeeze(1) if self.width == 1 else out
