"""``elasticps.nn.SparseEmbeddingSequence``: a multi-valued column (a history of items, the
words of a text) as one embedding per position, padded to ``[B, L, dim]`` with a mask, for
attention over the sequence. Rows on the pservers.

A bag layer (sparse_bag.py) reduces each row's values to one vector; this layer keeps them
apart: row ``i``'s values, in order, become ``out.values[i, :n_i]`` and ``out.mask[i, :n_i]``
is True; the positions after them are zeros with the mask False. ``max_len`` fixes ``L`` (a
row longer than it keeps its last ``max_len`` values: a history's most recent); without it
``L`` is the batch's longest row. Only kept values are looked up, pulled and trained; the
padding reads no row and gets no gradient. The arithmetic is the data layer's
(:meth:`elasticps.data.batch.Bag.padded`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from elasticps.data.batch import Bag, Batch, PaddedBag, TensorBatch
from elasticps.errors import ConfigError
from elasticps.trainer.optim import OptimizerSpec
from elasticps.trainer.row_policy import Admit, Evict
from elasticps.trainer.sparse import RowInit, SparseLayer, numpy_batch


class Padded(NamedTuple):
    """A sequence layer's output: ``values`` float [B, L, dim] (zeros at padding) and ``mask``
    bool [B, L] (True at real positions)."""

    values: torch.Tensor
    mask: torch.Tensor


class SparseEmbeddingSequence(SparseLayer):
    """One row per position of a multi-valued ``column``: :class:`Padded` ``(values [B, L,
    dim], mask [B, L])``. ``max_len`` fixes ``L`` and keeps each row's last ``max_len`` values
    (None: ``L`` is the batch's longest row). Called without a batch it takes ``(values,
    offsets)`` tensors, as ``SparseEmbeddingBag`` does (offsets of length B+1)."""

    def __init__(
        self,
        table_name: str,
        num_embeddings: int,
        dim: int,
        optimizer: OptimizerSpec | None = None,
        initializer: RowInit | None = None,
        *,
        column: str | None = None,
        max_len: int | None = None,
        admit: Admit | None = None,
        evict: Evict | str | None = None,
        max_rows: int = 0,
    ) -> None:
        super().__init__(table_name, num_embeddings, dim, optimizer, initializer, admit, evict,
                         max_rows)
        if column is not None and (not isinstance(column, str) or not column):
            raise ConfigError(f"SparseEmbeddingSequence {table_name!r}: column={column!r} must "
                              "be a column name")
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                    or max_len < 1):
            raise ConfigError(f"SparseEmbeddingSequence {table_name!r}: max_len={max_len!r} "
                              "must be an integer >= 1 (or None: the batch's longest row)")
        self.column = column
        self.max_len = max_len
        # The last batch's padding, so ids_for and forward compute it once per batch.
        self._padded: tuple[Batch, PaddedBag] | None = None

    def extra_repr(self) -> str:
        return (f"table={self.table_name!r}, num_embeddings={self.num_embeddings}, "
                f"dim={self.dim}, column={self.column!r}, max_len={self.max_len}")

    def bag_of(self, batch: Batch) -> Bag:
        column = self.column or ""
        if column in batch.bags:
            return batch.bags[column]
        raise ConfigError(
            f"SparseEmbeddingSequence {self.table_name!r} reads the multi-valued column "
            f"{self.column!r}, which the batch does not have; its multi-valued columns are "
            f"{sorted(batch.bags)}")

    def padded_of(self, batch: Batch) -> PaddedBag:
        """This layer's column of ``batch`` padded (computed once per batch)."""
        cached = self._padded
        if cached is not None and cached[0] is batch:
            return cached[1]
        padded = self.bag_of(batch).padded(self.max_len)
        self._padded = (batch, padded)
        return padded

    def ids_for(self, batch: Batch) -> np.ndarray | None:
        if self.column is None:
            return None
        bag, padded = self.bag_of(batch), self.padded_of(batch)
        return np.ascontiguousarray(bag.values[padded.source], dtype=np.int64)

    def examples_for(self, batch: Batch) -> np.ndarray | None:
        if self.column is None:
            return None
        padded = self.padded_of(batch)
        return padded.flat // max(padded.ids.shape[1], 1)  # the kept values' rows

    def export_record(self) -> dict[str, Any]:
        return {**super().export_record(), "kind": "sequence", "column": self.column,
                "max_len": self.max_len}

    def forward(self, x: TensorBatch | Batch | torch.Tensor,
                offsets: torch.Tensor | None = None) -> Padded:
        batch = numpy_batch(x)
        if batch is not None:
            if self.column is None:
                raise ConfigError(f"SparseEmbeddingSequence {self.table_name!r} was called "
                                  "with a batch but has no column=...")
            padded = self.padded_of(batch)
            rows, positions = self._lookup(batch, None)
        else:
            if not isinstance(x, torch.Tensor) or x.dim() != 1 or offsets is None:
                raise ConfigError(f"SparseEmbeddingSequence {self.table_name!r} takes a batch, "
                                  "or 1-D values with offsets (length B+1)")
            bag = Bag(x.detach().cpu().numpy().astype(np.int64),
                      offsets.detach().cpu().numpy().astype(np.int64))
            padded = bag.padded(self.max_len)
            rows, positions = self._lookup(None, bag.values[padded.source])
        batch_rows, width = padded.ids.shape
        flat = self._placement.tensor(padded.flat)
        gathered = rows.index_select(0, positions)
        values = gathered.new_zeros((batch_rows * width, self.dim)).index_copy(0, flat, gathered)
        mask = self._placement.tensor(padded.mask)
        return Padded(values.view(batch_rows, width, self.dim), mask)
