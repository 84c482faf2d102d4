"""Local (one-process) sparse lookups in plain PyTorch: the reference run and the scorer.

They read the same batch fields as elasticps' layers (``batch.ids[column]``,
``batch.bags[column]``) and import nothing from elasticps. A :class:`RowTable` holds the rows of
known ids (sorted) plus one zero row that every other id reads, which is exactly how an export
describes a table (``sparse/T/ids``, ``sparse/T/rows``: the ids training touched; an id missing
from it was never trained). Trainable, it is the reference: a local copy of a pserver table
started from the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional


class RowTable(nn.Module):
    """Rows of the sorted ``ids`` and a zero row for any other id: ids of any shape ->
    ``[..., dim]``. ``trainable``: the rows are a Parameter (the zero row is never read by data
    whose ids are all known, so it stays zero)."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, *, trainable: bool = False) -> None:
        super().__init__()
        ids = ids.to(torch.int64)
        if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
            raise ValueError("RowTable ids must be sorted and unique")
        self.register_buffer("ids", ids)
        padded = torch.cat([rows.to(torch.float32), torch.zeros(1, rows.shape[1])])
        if trainable:
            self.weight = nn.Parameter(padded)
        else:
            self.register_buffer("weight", padded)

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    def positions(self, ids: torch.Tensor) -> torch.Tensor:
        """Row index of each id (the zero row, index ``len(ids)``, for unknown ones)."""
        n = self.ids.numel()
        if n == 0:
            return torch.zeros_like(ids)
        pos = torch.searchsorted(self.ids, ids).clamp(max=n - 1)
        return torch.where(self.ids[pos] == ids, pos, torch.full_like(pos, n))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[self.positions(ids)]


class LocalEmbedding(nn.Module):
    """A table read by single-valued columns: one name -> [B, dim], a list of k -> [B, k, dim]
    (what ``elasticps.nn.SparseEmbedding(columns=...)`` returns); called with an id tensor,
    that shape plus ``(dim,)``."""

    def __init__(self, table: RowTable, columns: str | Sequence[str]) -> None:
        super().__init__()
        self.table = table
        self.columns: str | tuple[str, ...] = columns if isinstance(columns, str) \
            else tuple(columns)

    def forward(self, batch: object) -> torch.Tensor:
        if isinstance(batch, torch.Tensor):
            return self.table(batch)
        ids = batch.ids  # type: ignore[attr-defined]
        if isinstance(self.columns, str):
            return self.table(ids[self.columns])
        return self.table(torch.stack([ids[c] for c in self.columns], dim=1))


class LocalBag(nn.Module):
    """A table read by one multi-valued column: batch -> [B, dim], the ``mode`` (sum or mean)
    of the rows of each row's values (an empty bag gives zeros), as
    ``elasticps.nn.SparseEmbeddingBag`` and ``torch.nn.EmbeddingBag`` compute it."""

    def __init__(self, table: RowTable, column: str, mode: str) -> None:
        super().__init__()
        self.table = table
        self.column = column
        self.mode = mode

    def forward(self, batch: object) -> torch.Tensor:
        bag = batch.bags[self.column]  # type: ignore[attr-defined]
        return functional.embedding_bag(self.table.positions(bag.values), self.table.weight,
                                        bag.offsets, mode=self.mode, include_last_offset=True)


class LocalSequence(nn.Module):
    """A table read by one multi-valued column, one row per position: batch -> (values [B, L,
    dim], mask [B, L]), each row's last ``max_len`` values left-aligned, zeros and False after
    them (what ``elasticps.nn.SparseEmbeddingSequence`` returns)."""

    def __init__(self, table: RowTable, column: str, max_len: int) -> None:
        super().__init__()
        self.table = table
        self.column = column
        self.max_len = max_len

    def forward(self, batch: object) -> tuple[torch.Tensor, torch.Tensor]:
        bag = batch.bags[self.column]  # type: ignore[attr-defined]
        kept = (bag.offsets[1:] - bag.offsets[:-1]).clamp(max=self.max_len)
        position = torch.arange(self.max_len)
        mask = position.unsqueeze(0) < kept.unsqueeze(1)  # [B, L]
        # Row i's kept values start kept[i] before its end.
        where = (bag.offsets[1:] - kept).unsqueeze(1) + position
        values = torch.cat([bag.values, torch.zeros(1, dtype=bag.values.dtype)])  # pads read 0
        ids = torch.where(mask, values[where.clamp(max=bag.values.numel())], 0)
        return self.table(ids) * mask.unsqueeze(2), mask


class LocalTables:
    """Lookup factories for the examples' models over tables given as ``{table: (ids, rows)}``
    (an export's or a dump's ``sparse/T/ids`` and ``sparse/T/rows``), one RowTable per name
    shared by every layer that reads it."""

    def __init__(self, rows: Mapping[str, tuple[torch.Tensor, torch.Tensor]], *,
                 trainable: bool = False) -> None:
        self.tables = {name: RowTable(ids, values, trainable=trainable)
                       for name, (ids, values) in rows.items()}

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, torch.Tensor], *,
                     trainable: bool = False) -> LocalTables:
        """From safetensors holding ``sparse/T/ids`` and ``sparse/T/rows`` for each table T."""
        names = sorted({key.split("/")[1] for key in tensors if key.startswith("sparse/")})
        return cls({name: (tensors[f"sparse/{name}/ids"], tensors[f"sparse/{name}/rows"])
                    for name in names}, trainable=trainable)

    def table(self, name: str, dim: int) -> RowTable:
        if name not in self.tables:
            raise KeyError(f"no rows for sparse table {name!r}; tables: {sorted(self.tables)}")
        table = self.tables[name]
        if table.dim != dim:
            raise ValueError(f"table {name!r} has rows of width {table.dim}, not {dim}")
        return table

    def embedding(self, name: str, id_space: int, dim: int,
                  columns: str | Sequence[str]) -> nn.Module:
        return LocalEmbedding(self.table(name, dim), columns)

    def bag(self, name: str, id_space: int, dim: int, column: str, mode: str) -> nn.Module:
        return LocalBag(self.table(name, dim), column, mode)

    def sequence(self, name: str, id_space: int, dim: int, column: str,
                 max_len: int) -> nn.Module:
        return LocalSequence(self.table(name, dim), column, max_len)

    def layer(self, record: Mapping[str, object]) -> nn.Module:
        """The lookup an export's layer record describes (``manifest.json``'s ``layers``)."""
        table = self.table(str(record["table"]), int(record["dim"]))  # type: ignore[call-overload]
        if record.get("kind") == "bag":
            if record.get("weighted"):
                raise ValueError("weighted bags are not used by these examples")
            return LocalBag(table, str(record["column"]), str(record["mode"]))
        if record.get("kind") == "embedding" and record.get("columns") is not None:
            return LocalEmbedding(table, record["columns"])  # type: ignore[arg-type]
        raise ValueError(f"layer record {dict(record)!r} reads no batch column")
