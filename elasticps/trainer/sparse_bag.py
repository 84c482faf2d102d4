"""``elasticps.nn.SparseEmbeddingBag``: the sum or mean of the rows of a variable-length bag of
ids per row (a multi-valued column such as ``genres = "Drama|War"``), rows on the pservers.

It reads one column's :class:`~elasticps.data.batch.Bag` (values, offsets, optional per-value
weights) and reduces with :func:`torch.nn.functional.embedding_bag` over the table's installed
rows, so the result and its gradient are those of a ``torch.nn.EmbeddingBag`` holding the same
rows. A row with an empty bag gets zeros (as in PyTorch).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from torch.nn import functional

from elasticps.data.batch import Bag, Batch, TensorBatch
from elasticps.errors import ConfigError
from elasticps.trainer.optim import OptimizerSpec
from elasticps.trainer.row_policy import Admit, Evict
from elasticps.trainer.sparse import RowInit, SparseLayer, numpy_batch

MODES = ("sum", "mean")


class SparseEmbeddingBag(SparseLayer):
    """Sum (``mode="sum"``) or mean (``"mean"``) of the rows of each row's bag of ids: ``[B, dim]``.

    ``column`` names the multi-valued column read from a batch (a single-valued column works
    too: bags of one). ``weighted=True`` multiplies each row by the bag's per-value weight before
    summing (``mode="sum"`` only, as in PyTorch). Called without a batch it takes PyTorch's
    inputs: ``layer(values, offsets)`` with 1-D ``values`` and ``offsets`` of length B+1 (row i
    owns ``values[offsets[i]:offsets[i+1]]``), or a 2-D ``[B, k]`` tensor of k ids per row.
    """

    def __init__(
        self,
        table_name: str,
        num_embeddings: int,
        dim: int,
        optimizer: OptimizerSpec | None = None,
        initializer: RowInit | None = None,
        *,
        column: str | None = None,
        mode: Literal["sum", "mean"] = "sum",
        weighted: bool = False,
        admit: Admit | None = None,
        evict: Evict | str | None = None,
        max_rows: int = 0,
    ) -> None:
        super().__init__(table_name, num_embeddings, dim, optimizer, initializer, admit, evict,
                         max_rows)
        if mode not in MODES:
            raise ConfigError(f"SparseEmbeddingBag {table_name!r}: mode={mode!r} is not one of "
                              f"{', '.join(MODES)}")
        if weighted and mode != "sum":
            raise ConfigError(f"SparseEmbeddingBag {table_name!r}: per-value weights need "
                              "mode='sum' (as in torch.nn.EmbeddingBag)")
        if column is not None and (not isinstance(column, str) or not column):
            raise ConfigError(f"SparseEmbeddingBag {table_name!r}: column={column!r} must be "
                              "a column name")
        self.column = column
        self.mode = mode
        self.weighted = weighted

    def extra_repr(self) -> str:
        return (f"table={self.table_name!r}, num_embeddings={self.num_embeddings}, "
                f"dim={self.dim}, column={self.column!r}, mode={self.mode!r}, "
                f"weighted={self.weighted}")

    def bag_of(self, batch: Batch) -> Bag:
        """This layer's column in ``batch`` as a bag (a single-valued column: bags of one)."""
        column = self.column or ""
        if column in batch.bags:
            return batch.bags[column]
        if column in batch.ids:
            return Bag(np.ascontiguousarray(batch.ids[column], dtype=np.int64),
                       np.arange(len(batch) + 1, dtype=np.int64))
        raise ConfigError(
            f"SparseEmbeddingBag {self.table_name!r} reads column {self.column!r}, which the "
            f"batch does not have; its columns are {sorted([*batch.bags, *batch.ids])}")

    def ids_for(self, batch: Batch) -> np.ndarray | None:
        if self.column is None:
            return None
        return np.ascontiguousarray(self.bag_of(batch).values, dtype=np.int64)

    def examples_for(self, batch: Batch) -> np.ndarray | None:
        if self.column is None:
            return None
        offsets = self.bag_of(batch).offsets
        return np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))

    def export_record(self) -> dict[str, Any]:
        return {**super().export_record(), "kind": "bag", "column": self.column,
                "mode": self.mode, "weighted": self.weighted}

    def forward(self, x: TensorBatch | Batch | torch.Tensor, offsets: torch.Tensor | None = None,
                per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
        batch = numpy_batch(x)
        if batch is not None:
            if self.column is None:
                raise ConfigError(f"SparseEmbeddingBag {self.table_name!r} was called with a "
                                  "batch but has no column=...")
            bag = self.bag_of(batch)
            rows, positions = self._lookup(batch, None)
            offsets = self._placement.tensor(bag.offsets)
            if self.weighted:
                if bag.weights is None:
                    raise ConfigError(f"SparseEmbeddingBag {self.table_name!r} is weighted but "
                                      f"column {self.column!r} has no per-value weights")
                per_sample_weights = self._placement.tensor(bag.weights)
        else:
            if not isinstance(x, torch.Tensor):
                raise ConfigError(f"SparseEmbeddingBag {self.table_name!r} takes a batch or id "
                                  f"tensors, not {type(x).__name__}")
            if x.dim() == 2 and offsets is None:  # fixed-size bags, as torch.nn.EmbeddingBag
                offsets = torch.arange(x.shape[0] + 1, dtype=torch.int64) * x.shape[1]
            if x.dim() > 2 or offsets is None:
                raise ConfigError(f"SparseEmbeddingBag {self.table_name!r}: give 1-D values "
                                  "with offsets (length B+1), or a 2-D [B, k] id tensor")
            rows, positions = self._lookup(None, x.detach().cpu().numpy().reshape(-1))
            if per_sample_weights is not None and self.mode != "sum":
                raise ConfigError("per-value weights need mode='sum'")
        return functional.embedding_bag(positions, rows, offsets.to(positions.device, torch.int64),
                               mode=self.mode,
                               per_sample_weights=per_sample_weights, include_last_offset=True)
