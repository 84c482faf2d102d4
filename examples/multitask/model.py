"""A multi-task model in plain PyTorch: a shared bottom and one head per label of the schema.

The bottom looks up every single-valued categorical column of each sparse table (one lookup per
table, ``[B, k, dim]``), concatenates them with the normalised dense columns and applies an MLP
(``hidden``); each label of the schema gets a head on the bottom's output: one logit for a
``binary`` label, one value for a ``float`` label, one logit per class for a ``class`` label.
The output is ``{label: head output}``, which ``elasticps.Trainer(heads=...)`` trains with each
label kind's loss, weighted (:func:`weighted_loss` computes the same in plain PyTorch).

The lookups are injected (``make_embedding(table, id_space, dim, columns)``), so one class trains
with ``elasticps.nn.SparseEmbedding`` and runs with local tables
(``examples/tabular/local_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from elasticps.data.schema import Schema

MakeEmbedding = Callable[[str, int, int, Sequence[str]], nn.Module]


def head_width(kind: str, classes: int | None) -> int:
    return int(classes or 0) if kind == "class" else 1


class MultiTaskModel(nn.Module):
    def __init__(self, schema: Schema, make_embedding: MakeEmbedding, *,
                 hidden: Sequence[int] = (64, 32)) -> None:
        super().__init__()
        lookups, width = [], len(schema.dense_columns)
        for name, table in schema.tables.items():
            columns = [c.name for c in schema.columns_of(name) if c.kind == "categorical"]
            if columns:
                lookups.append(make_embedding(name, table.id_space, table.dim, columns))
                width += len(columns) * table.dim
        self.lookups = nn.ModuleList(lookups)
        layers: list[nn.Module] = []
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.bottom = nn.Sequential(*layers)
        self.heads = nn.ModuleDict({label.name: nn.Linear(width, head_width(label.kind,
                                                                            label.classes))
                                    for label in schema.labels})

    def forward(self, batch: Any) -> dict[str, torch.Tensor]:
        fields = [batch.dense] + [lookup(batch).flatten(1) for lookup in self.lookups]
        shared = self.bottom(torch.cat(fields, dim=1))
        return {name: head(shared) for name, head in self.heads.items()}


def weighted_loss(schema: Schema, weights: Mapping[str, float]
                  ) -> Callable[[Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor]:
    """``sum(weight * loss)`` over the labels, each kind's loss written out in plain PyTorch
    (BCE with logits, mean squared error, cross-entropy): the reference the trainer's heads
    are checked against."""
    columns = {label.name: (i, label.kind) for i, label in enumerate(schema.labels)}

    def loss(output: Mapping[str, torch.Tensor], label: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for name, weight in weights.items():
            column, kind = columns[name]
            target, out = label[:, column], output[name]
            if kind == "binary":
                part = functional.binary_cross_entropy_with_logits(out.squeeze(1), target)
            elif kind == "float":
                part = functional.mse_loss(out.squeeze(1), target)
            else:
                part = functional.cross_entropy(out, target.long())
            total = total + weight * part
        return total

    return loss
