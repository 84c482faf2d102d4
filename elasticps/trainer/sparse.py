"""``elasticps.nn.SparseEmbedding``: an embedding table whose rows live on the pservers.

For a batch, the layer pulls only the rows of the batch's unique ids, wraps them in a leaf
tensor that requires grad and gathers by the inverse index, so autograd sums the gradient of
repeated ids into one row. After ``backward()`` the trainer collects ``(unique_ids, grad_rows)``
and pushes them; the pserver applies the optimizer to exactly those rows.

Outside a trainer (no client bound) the layer refuses to run: it has no rows of its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from elasticps.errors import ConfigError, FailedPreconditionError, InvalidArgumentError
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.optim import OptimizerSpec


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


class SparseEmbedding(torch.nn.Module):
    """Embedding rows held by the pservers, table ``table_name``, rows of width ``dim``.

    ``num_embeddings`` bounds the ids (``0 <= id < num_embeddings``); 0 means unbounded
    (hashed ids of any int64 value). ``optimizer`` overrides the trainer's optimizer for this
    table. Input: an int64 tensor of ids of any shape; output: that shape plus ``(dim,)``.
    """

    def __init__(
        self,
        table_name: str,
        num_embeddings: int,
        dim: int,
        optimizer: OptimizerSpec | None = None,
        initializer: RowInit | None = None,
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
        self._client: ParameterClient | None = None
        self._lock = threading.Lock()
        self._offered: tuple[np.ndarray, np.ndarray] | None = None
        self._pending: list[tuple[np.ndarray, torch.Tensor]] = []

    def extra_repr(self) -> str:
        return f"table={self.table_name!r}, num_embeddings={self.num_embeddings}, dim={self.dim}"

    def table_spec(self, default_optimizer: OptimizerSpec) -> pserver_pb2.TableSpec:
        optimizer = self.optimizer or default_optimizer
        return pserver_pb2.TableSpec(
            name=self.table_name, kind=pserver_pb2.TableSpec.SPARSE, dim=self.dim,
            id_space=self.num_embeddings, dtype=common_pb2.FLOAT32,
            optimizer=optimizer.to_proto(), initializer=self.initializer.to_proto(),
        )

    def bind(self, client: ParameterClient | None) -> None:
        """Attach the pserver client the rows come from (the trainer does this)."""
        self._client = client
        self._offered = None
        self._pending.clear()

    def unique_ids(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Validated ``(unique ids, inverse index)`` of a batch's ids."""
        flat = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        bound = self.num_embeddings
        if flat.size and (flat.min() < 0 or (bound and flat.max() >= bound)):
            bad = flat[(flat < 0) | (flat >= bound if bound else False)]
            raise InvalidArgumentError(
                f"sparse table {self.table_name!r} got id {int(bad[0])}, outside "
                f"[0, {self.num_embeddings or 'inf'})")
        uniq, inverse = np.unique(flat, return_inverse=True)
        return uniq, inverse.reshape(-1)

    def pull(self, uniq: np.ndarray) -> np.ndarray:
        """Rows for sorted unique ids, straight from the pservers."""
        if self._client is None:
            raise FailedPreconditionError(
                f"SparseEmbedding {self.table_name!r} is not bound to pservers; run it inside an "
                "elasticps.Trainer")
        return self._client.pull_sparse(self.table_name, uniq)

    def offer(self, uniq: np.ndarray, rows: np.ndarray) -> None:
        """Hand over rows pulled ahead of time (the prefetcher); used if the next batch's
        unique ids are exactly ``uniq``."""
        with self._lock:
            self._offered = (uniq, rows)

    def _rows_for(self, uniq: np.ndarray) -> np.ndarray:
        with self._lock:
            offered, self._offered = self._offered, None
        if offered is not None and np.array_equal(offered[0], uniq):
            return offered[1]
        return self.pull(uniq)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids_np = ids.detach().cpu().numpy()
        uniq, inverse = self.unique_ids(ids_np)
        rows = np.array(self._rows_for(uniq), dtype=np.float32, copy=True).reshape(-1, self.dim)
        leaf = torch.from_numpy(rows)
        if torch.is_grad_enabled() and self.training:
            leaf.requires_grad_(True)
            self._pending.append((uniq, leaf))
        out = leaf.index_select(0, torch.from_numpy(inverse))
        return out.view(*ids.shape, self.dim)

    def take_grads(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(ids, grad_rows)`` of every forward since the last call; None when nothing ran.

        A table used twice in one batch yields repeated ids; the pserver sums duplicates.
        """
        pending, self._pending = self._pending, []
        parts = [(uniq, leaf.grad) for uniq, leaf in pending if leaf.grad is not None]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][0], parts[0][1].numpy()
        ids = np.concatenate([p[0] for p in parts])
        grads = np.concatenate([p[1].numpy() for p in parts])
        return ids, grads
