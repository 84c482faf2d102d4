"""Layers whose rows live on the pservers: ``elasticps.nn.SparseEmbedding`` (one id per row and
column) and, in ``sparse_bag.py``, ``SparseEmbeddingBag`` (a variable-length bag of ids per row).

A layer that names its ``columns`` derives its ids from the batch itself (``ids_for``), so the
step runner can pull, before the forward pass, exactly the rows the layer will look up: it
unions the ids of every layer of a table, pulls once per table and installs the rows as one
:class:`~elasticps.trainer.sparse_rows.TableRows` that all those layers gather from. Autograd
then sums the gradients of every layer and repeated id into one ``[unique ids, dim]`` gradient,
which the trainer pushes; the pserver applies the optimizer to exactly those rows.

A layer called with a raw id tensor works too: it takes its rows from the installed ones when
they hold every id it needs (a subset lookup), and otherwise pulls them itself, synchronously.
Outside a trainer (no client bound, nothing installed) a layer refuses to run: it has no rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from elasticps.data.batch import Batch, TensorBatch
from elasticps.errors import ConfigError, FailedPreconditionError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.device import CPU, Placement
from elasticps.trainer.optim import OptimizerSpec
from elasticps.trainer.row_policy import Admit, Evict, policy_proto

if TYPE_CHECKING:
    from elasticps.trainer.sparse_rows import TableRows


@dataclass(frozen=True)
class RowInit:
    """How the pservers create a row on first touch: a pure function of (seed, id)."""

    kind: Literal["zeros", "uniform", "normal"] = "uniform"
    scale: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("zeros", "uniform", "normal"):
            raise ConfigError(f"row initializer kind {self.kind!r} is not zeros, uniform or normal")
        if not (np.isfinite(self.scale) and self.scale >= 0):
            raise ConfigError(f"row initializer scale={self.scale!r} must be finite and >= 0")
        if self.seed < 0:
            raise ConfigError(f"row initializer seed={self.seed!r} must be >= 0")

    def to_proto(self) -> pserver_pb2.Initializer:
        kinds = {"zeros": pserver_pb2.Initializer.ZEROS, "uniform": pserver_pb2.Initializer.UNIFORM,
                 "normal": pserver_pb2.Initializer.NORMAL}
        return pserver_pb2.Initializer(kind=kinds[self.kind], scale=self.scale, seed=self.seed)


def numpy_batch(x: Any) -> Batch | None:
    """The numpy :class:`Batch` behind a layer's input, or None for a raw tensor."""
    if isinstance(x, TensorBatch):
        return x.source
    if isinstance(x, Batch):
        return x
    return None


class SparseLayer(torch.nn.Module):
    """What every pserver-backed layer shares: its table, the client, where its rows come from.

    Subclasses say which ids they read from a batch (:meth:`ids_for`, or None when they read
    none) and what the export records about them (:meth:`export_record`).
    """

    def __init__(
        self,
        table_name: str,
        num_embeddings: int,
        dim: int,
        optimizer: OptimizerSpec | None = None,
        initializer: RowInit | None = None,
        admit: Admit | None = None,
        evict: Evict | str | None = None,
        max_rows: int = 0,
    ) -> None:
        super().__init__()
        if not table_name or "/" in table_name:
            raise ConfigError(f"sparse table name {table_name!r} must be non-empty without '/'")
        if num_embeddings < 0:
            raise ConfigError(f"num_embeddings={num_embeddings!r} must be >= 0 (0 = unbounded)")
        if dim < 1:
            raise ConfigError(f"embedding dim={dim!r} must be >= 1")
        self.table_name = table_name
        self.num_embeddings = num_embeddings
        self.dim = dim
        self.optimizer = optimizer
        self.initializer = initializer or RowInit()
        self.policy = policy_proto(table_name, admit, evict, max_rows)
        self._client: ParameterClient | None = None
        self._placement: Placement = CPU
        self._rows: TableRows | None = None  # installed by the step runner for one batch
        self._pending: list[tuple[np.ndarray, torch.Tensor]] = []  # rows this layer pulled

    # -- what the trainer asks of a layer ----------------------------------------------------

    def ids_for(self, batch: Batch) -> np.ndarray | None:
        """The ids (int64, flat) this layer looks up in ``batch``; None if it derives none."""
        return None

    def examples_for(self, batch: Batch) -> np.ndarray | None:
        """The example (row of ``batch``) each id of :meth:`ids_for` comes from, int64 in
        the same order: what show/click counts need. None if the layer derives no ids."""
        return None

    def export_record(self) -> dict[str, Any]:
        """What a scorer needs to rebuild this layer's lookup from an export."""
        return {"table": self.table_name, "dim": self.dim}

    def table_spec(self, default_optimizer: OptimizerSpec) -> pserver_pb2.TableSpec:
        optimizer = self.optimizer or default_optimizer
        return pserver_pb2.TableSpec(
            name=self.table_name, kind=pserver_pb2.TableSpec.SPARSE, dim=self.dim,
            id_space=self.num_embeddings, dtype=common_pb2.FLOAT32,
            optimizer=optimizer.to_proto(), initializer=self.initializer.to_proto(),
            policy=self.policy,
        )

    def bind(self, client: ParameterClient | None, placement: Placement = CPU) -> None:
        """Attach the pserver client the rows come from, and where they go (the trainer does
        this)."""
        self._client = client
        self._placement = placement
        self._rows = None
        self._pending.clear()

    def install(self, rows: TableRows | None) -> None:
        """Use ``rows`` (this table's rows for the coming batch) until the next install; rows
        the layer pulled itself for an earlier batch are forgotten."""
        self._rows = rows
        self._pending.clear()

    def unique_ids(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Validated ``(sorted unique ids, inverse index)`` of ids of any shape."""
        flat = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        uniq, inverse = np.unique(flat, return_inverse=True)
        # Sorted, so the range check reads two values instead of scanning every id.
        if uniq.size and (uniq[0] < 0 or (self.num_embeddings and
                                          uniq[-1] >= self.num_embeddings)):
            bad = uniq[0] if uniq[0] < 0 else uniq[-1]
            raise InvalidArgumentError(
                f"sparse table {self.table_name!r} got id {int(bad)}, outside "
                f"[0, {self.num_embeddings or 'inf'})")
        return uniq, inverse.reshape(-1)

    def pull(self, uniq: np.ndarray) -> np.ndarray:
        """Rows for sorted unique ids, straight from the pservers."""
        if self._client is None:
            raise FailedPreconditionError(
                f"{type(self).__name__} {self.table_name!r} is not bound to pservers; run it "
                "inside an elasticps.Trainer (connected, not yet closed)")
        return self._client.pull_sparse(self.table_name, uniq)

    def take_grads(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(ids, grad_rows)`` of the rows this layer pulled itself since the last call (the
        installed rows' gradients are collected from the :class:`TableRows`); None if none."""
        pending, self._pending = self._pending, []
        parts = [(uniq, leaf.grad) for uniq, leaf in pending if leaf.grad is not None]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][0], self._placement.host(parts[0][1])
        return (np.concatenate([p[0] for p in parts]),
                np.concatenate([self._placement.host(p[1]) for p in parts]))

    # -- the lookup itself -------------------------------------------------------------------

    def _lookup(self, batch: Batch | None, flat: np.ndarray | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, positions)``: rows[positions] are the rows of the ids looked up, in order.

        The ids are this layer's ids in ``batch`` or, for a raw call, ``flat``. Installed rows
        serve them when they hold every id (the prefetcher computed the positions of a batch it
        planned for; any other ids are searched); otherwise the layer pulls them now.
        """
        installed = self._rows
        if installed is not None:
            if batch is not None:
                planned = installed.positions_for(self, batch)
                if planned is not None:
                    return installed.leaf, planned
            if flat is None:
                flat = self._derived(batch)
            found = installed.find(flat)
            if found is not None:
                return installed.leaf, found
        if flat is None:
            flat = self._derived(batch)
        uniq, inverse = self.unique_ids(flat)
        leaf = self._placement.tensor(np.require(self.pull(uniq), np.float32, ["C", "W"]))
        if torch.is_grad_enabled() and self.training:
            leaf.requires_grad_(True)
            self._pending.append((uniq, leaf))
        return leaf, self._placement.tensor(inverse)

    def _derived(self, batch: Batch | None) -> np.ndarray:
        ids = None if batch is None else self.ids_for(batch)
        if ids is None:
            raise ConfigError(
                f"{type(self).__name__} {self.table_name!r} was called with a batch but reads "
                "no column of it; give it columns=... (or call it with an id tensor)")
        return ids


class SparseEmbedding(SparseLayer):
    """Embedding rows held by the pservers, table ``table_name``, rows of width ``dim``.

    ``num_embeddings`` bounds the ids (``0 <= id < num_embeddings``); 0 means unbounded
    (hashed ids of any int64 value). ``optimizer`` overrides the trainer's optimizer for this
    table. Several layers may share a table (same ``dim`` and ``num_embeddings``).

    ``columns`` names the single-valued categorical column(s) the layer reads when called with
    a batch: a name gives ``[B, dim]``, a sequence of k names ``[B, k, dim]`` (e.g. the 26
    Criteo slots into one table). Called with an int64 tensor of ids of any shape instead, it
    returns that shape plus ``(dim,)``.

    ``admit`` (:class:`Admit`), ``evict`` (:class:`Evict`, or ``"lru"``/``"lfu"``/``"score"``:
    a decayed show/click score, for CTR tables) and
    ``max_rows`` (rows per pserver; evicting LRU unless ``evict`` says otherwise) bound the
    table: by default every pushed id gets a row, kept for the table's life.
    """

    def __init__(
        self,
        table_name: str,
        num_embeddings: int,
        dim: int,
        optimizer: OptimizerSpec | None = None,
        initializer: RowInit | None = None,
        *,
        columns: str | Sequence[str] | None = None,
        admit: Admit | None = None,
        evict: Evict | str | None = None,
        max_rows: int = 0,
    ) -> None:
        super().__init__(table_name, num_embeddings, dim, optimizer, initializer, admit, evict,
                         max_rows)
        if columns is not None and not isinstance(columns, str):
            columns = tuple(columns)
            if not columns or not all(isinstance(c, str) and c for c in columns):
                raise ConfigError(f"SparseEmbedding {table_name!r}: columns={columns!r} must "
                                  "be a column name or a non-empty sequence of names")
        elif columns == "":
            raise ConfigError(f"SparseEmbedding {table_name!r}: columns is an empty name")
        self.columns: str | tuple[str, ...] | None = columns

    def extra_repr(self) -> str:
        return (f"table={self.table_name!r}, num_embeddings={self.num_embeddings}, "
                f"dim={self.dim}, columns={self.columns!r}")

    def ids_for(self, batch: Batch) -> np.ndarray | None:
        if self.columns is None:
            return None
        names = (self.columns,) if isinstance(self.columns, str) else self.columns
        missing = [c for c in names if c not in batch.ids]
        if missing:
            hint = (" (a multi-valued column: read it with SparseEmbeddingBag)"
                    if any(c in batch.bags for c in missing) else "")
            raise ConfigError(
                f"SparseEmbedding {self.table_name!r} reads column(s) {missing}{hint}; the "
                f"batch's single-valued columns are {sorted(batch.ids)}")
        if isinstance(self.columns, str):
            return np.ascontiguousarray(batch.ids[self.columns], dtype=np.int64)
        return batch.stack_ids(self.columns).reshape(-1)

    def examples_for(self, batch: Batch) -> np.ndarray | None:
        if self.columns is None:
            return None
        per_row = 1 if isinstance(self.columns, str) else len(self.columns)
        return np.repeat(np.arange(len(batch), dtype=np.int64), per_row)

    def export_record(self) -> dict[str, Any]:
        columns = list(self.columns) if isinstance(self.columns, tuple) else self.columns
        return {**super().export_record(), "kind": "embedding", "columns": columns}

    def forward(self, x: TensorBatch | Batch | torch.Tensor) -> torch.Tensor:
        batch = numpy_batch(x)
        if batch is None:
            if not isinstance(x, torch.Tensor):
                raise ConfigError(f"SparseEmbedding {self.table_name!r} takes a batch or an "
                                  f"int64 id tensor, not {type(x).__name__}")
            rows, positions = self._lookup(None, x.detach().cpu().numpy().reshape(-1))
            shape: tuple[int, ...] = tuple(x.shape)
        else:
            rows, positions = self._lookup(batch, None)
            shape = (len(batch),) if isinstance(self.columns, str) else (
                len(batch), len(self.columns or ()))
        return rows.index_select(0, positions).view(*shape, self.dim)
