"""The seed's word model in plain PyTorch: an N-gram neural language model (Bengio et al. 2003).

The N-1 context words (columns ``w1..w{N-1}`` of ``elasticps data convert text``) are looked up
in one word-embedding table, concatenated, passed through a tanh layer, and a linear layer gives
one logit per word of the vocabulary (``</s>`` included): the next word's distribution. The
lookup is injected (``make_embedding(table, id_space, dim, columns) -> module: batch ->
[B, N-1, dim]``), so the same class trains with ``elasticps.nn.SparseEmbedding`` (rows on the
pservers) and runs with a local table (examples/tabular/local_layers.py).

The output layer is dense (hidden x vocabulary, pulled and pushed every batch): right for the
example's vocabularies of hundreds to a few thousand words; a much bigger one would want a
sampled softmax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from elasticps.data.schema import Schema

MakeEmbedding = Callable[[str, int, int, Sequence[str]], nn.Module]


def context_columns(schema: Schema) -> tuple[str, tuple[str, ...]]:
    """The table and the context columns of an N-gram dataset (``convert text``)."""
    columns = tuple(c.name for c in schema.categorical_columns)
    tables = {schema.column(c).table for c in columns}
    if schema.label_kind != "class" or not columns or len(tables) != 1:
        raise ValueError("not an N-gram dataset: it needs a class label and context columns "
                         "of one table (elasticps data convert text ... --ngram N)")
    return str(tables.pop()), columns


class NgramModel(nn.Module):
    def __init__(self, schema: Schema, make_embedding: MakeEmbedding, *,
                 hidden: int = 128) -> None:
        super().__init__()
        table, columns = context_columns(schema)
        decl = schema.tables[table]
        self.context = make_embedding(table, decl.id_space, decl.dim, columns)
        self.hidden = nn.Linear(len(columns) * decl.dim, hidden)
        self.out = nn.Linear(hidden, int(schema.num_classes or decl.id_space))

    def forward(self, batch: object) -> torch.Tensor:
        words = self.context(batch).flatten(1)  # [B, (N-1) * dim]
        return self.out(torch.tanh(self.hidden(words)))  # [B, vocabulary] logits
