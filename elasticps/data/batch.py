"""One batch of a dataset as named arrays: what a reader yields and what a model receives.

::

    dense   float32 [B, D]      the dense columns, normalised, in schema order (``dense_names``)
    vectors {column: float32 [B, length]}  dense_vector columns, as stored (a missing one: 0s)
    ids     {column: int64 [B]} single-valued categorical columns, as ids in their table's space
    bags    {column: Bag}       multi-valued categorical and text columns: ``values`` int64 [N],
                                ``offsets`` int64 [B+1] (row i owns values[offsets[i]:
                                offsets[i+1]]), optional per-value ``weights`` float32 [N]
    label   float32 [B] (one label) or [B, L] (several labels, or a multi-hot set of L classes)
    weight  float32 [B] per-row loss weights, or None

Which table a column's ids belong to is the dataset schema's business (each categorical column
names its table); a batch only carries the ids. :meth:`Batch.to_torch` gives a
:class:`TensorBatch` with the same fields as tensors, sharing memory with the arrays on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from elasticps.errors import DataError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Bag:
    """The values of one multi-valued column for a batch: row i owns
    ``values[offsets[i]:offsets[i + 1]]`` (empty for a row with no value)."""

    values: np.ndarray  # int64 [N]
    offsets: np.ndarray  # int64 [B + 1], offsets[0] == 0, offsets[-1] == N
    weights: np.ndarray | None = None  # float32 [N]

    def __post_init__(self) -> None:
        if self.values.ndim != 1 or self.offsets.ndim != 1 or self.offsets.size < 1:
            raise DataError(f"a bag needs 1-D values and offsets, got {self.values.shape} and "
                            f"{self.offsets.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != self.values.size or (
                self.offsets.size > 1 and np.any(np.diff(self.offsets) < 0)):
            raise DataError("bag offsets must start at 0, never decrease and end at the number "
                            f"of values ({self.values.size})")
        if self.weights is not None and self.weights.shape != self.values.shape:
            raise DataError(f"bag weights {self.weights.shape} do not match its values "
                            f"{self.values.shape}")

    @property
    def rows(self) -> int:
        return int(self.offsets.size - 1)

    def padded(self, max_len: int | None = None) -> PaddedBag:
        """Each row's values as one row of a ``[B, L]`` matrix, left-aligned, with a mask of
        the real positions: ``L`` is ``max_len``, or the longest row when None; a row longer
        than ``max_len`` keeps its last ``max_len`` values (a history's most recent)."""
        if max_len is not None and max_len < 1:
            raise DataError(f"max_len={max_len} must be >= 1")
        lengths = np.diff(self.offsets)
        width = int(lengths.max(initial=0)) if max_len is None else max_len
        kept = np.minimum(lengths, width)
        rows = np.repeat(np.arange(self.rows, dtype=np.int64), kept)
        first = np.repeat(np.cumsum(kept) - kept, kept)
        position = np.arange(rows.size, dtype=np.int64) - first
        source = np.repeat(self.offsets[1:] - kept, kept) + position
        ids = np.zeros((self.rows, width), dtype=np.int64)
        mask = np.zeros((self.rows, width), dtype=bool)
        ids[rows, position] = self.values[source]
        mask[rows, position] = True
        return PaddedBag(ids, mask, source, rows * width + position)

    def slice(self, start: int, stop: int) -> Bag:
        """Rows ``[start, stop)``, with offsets rebased to 0 (the values are views)."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        weights = None if self.weights is None else self.weights[lo:hi]
        return Bag(self.values[lo:hi], self.offsets[start:stop + 1] - lo, weights)


@dataclass(frozen=True)
class PaddedBag:
    """A bag as a ``[B, L]`` matrix (:meth:`Bag.padded`): ``ids`` (0 where ``mask`` is
    False), and for each kept value, in row order, its index in the bag's ``values``
    (``source``) and its flat position in the matrix (``flat``)."""

    ids: np.ndarray  # int64 [B, L]
    mask: np.ndarray  # bool [B, L]
    source: np.ndarray  # int64 [kept values]
    flat: np.ndarray  # int64 [kept values]


@dataclass(frozen=True)
class Batch:
    """A batch of rows as numpy arrays (see the module docstring for the layout)."""

    label: np.ndarray
    dense: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    dense_names: tuple[str, ...] = ()
    ids: Mapping[str, np.ndarray] = field(default_factory=dict)
    bags: Mapping[str, Bag] = field(default_factory=dict)
    weight: np.ndarray | None = None
    vectors: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rows = int(self.label.shape[0]) if self.label.ndim else -1
        if rows < 0:
            raise DataError("a batch's label must have one entry (or row) per example")
        if not self.dense_names and self.dense.size == 0:
            # No dense columns: an empty [B, 0] matrix, so models can concatenate it anyway.
            object.__setattr__(self, "dense", np.zeros((rows, 0), np.float32))
        if self.dense.shape != (rows, len(self.dense_names)):
            raise DataError(f"dense {self.dense.shape} does not match {rows} rows of "
                            f"{len(self.dense_names)} named columns")
        for name, ids in self.ids.items():
            if ids.shape != (rows,):
                raise DataError(f"ids of column {name!r} have shape {ids.shape}, not ({rows},)")
        for name, bag in self.bags.items():
            if bag.rows != rows:
                raise DataError(f"bag column {name!r} has {bag.rows} rows, not {rows}")
        if self.weight is not None and self.weight.shape != (rows,):
            raise DataError(f"weight has shape {self.weight.shape}, not ({rows},)")
        for name, vectors in self.vectors.items():
            if vectors.ndim != 2 or vectors.shape[0] != rows:
                raise DataError(f"vectors of column {name!r} have shape {vectors.shape}, not "
                                f"({rows}, length)")

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def stack_ids(self, columns: Sequence[str]) -> np.ndarray:
        """The ids of single-valued ``columns`` side by side: int64 [B, len(columns)]."""
        missing = [c for c in columns if c not in self.ids]
        if missing:
            raise DataError(f"the batch has no categorical column(s) {missing}; it has "
                            f"{sorted(self.ids)}")
        if not columns:
            return np.zeros((len(self), 0), np.int64)
        return np.stack([self.ids[c] for c in columns], axis=1)

    def slice(self, start: int, stop: int) -> Batch:
        """Rows ``[start, stop)`` as a batch of views."""
        return Batch(
            label=self.label[start:stop],
            dense=self.dense[start:stop],
            dense_names=self.dense_names,
            ids={name: ids[start:stop] for name, ids in self.ids.items()},
            bags={name: bag.slice(start, stop) for name, bag in self.bags.items()},
            weight=None if self.weight is None else self.weight[start:stop],
            vectors={name: vectors[start:stop] for name, vectors in self.vectors.items()},
        )

    def to_torch(self, device: str | torch.device | None = None) -> TensorBatch:
        """The same batch as tensors (sharing memory with the arrays on the CPU)."""
        import torch

        def tensor(array: np.ndarray) -> torch.Tensor:
            out = torch.from_numpy(np.ascontiguousarray(array))
            return out if device is None else out.to(device, non_blocking=True)

        bags = {name: TensorBag(tensor(bag.values), tensor(bag.offsets),
                                None if bag.weights is None else tensor(bag.weights))
                for name, bag in self.bags.items()}
        return TensorBatch(
            label=tensor(self.label), dense=tensor(self.dense), dense_names=self.dense_names,
            ids={name: tensor(ids) for name, ids in self.ids.items()}, bags=bags,
            weight=None if self.weight is None else tensor(self.weight), source=self,
            vectors={name: tensor(vectors) for name, vectors in self.vectors.items()})


@dataclass(frozen=True)
class TensorBag:
    values: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor | None = None


@dataclass(frozen=True)
class TensorBatch:
    """A :class:`Batch` as tensors: what ``model(batch)`` receives by default. ``source`` is
    the numpy batch it came from (the trainer derives each sparse layer's ids from it)."""

    label: torch.Tensor
    dense: torch.Tensor
    dense_names: tuple[str, ...]
    ids: Mapping[str, torch.Tensor]
    bags: Mapping[str, TensorBag]
    weight: torch.Tensor | None
    source: Batch
    vectors: Mapping[str, torch.Tensor] = field(default_factory=dict)  # float32 [B, length]

    def __len__(self) -> int:
        return int(self.label.shape[0])
