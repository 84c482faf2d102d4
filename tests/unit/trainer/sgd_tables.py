"""An in-memory stand-in for the pservers (dense and sparse tables, plain SGD), for unit tests
of the torch binding. Rows start as a pure function of (table, id), so a local PyTorch reference
can hold the same tables; every call is logged in order."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from elasticps.proto import common_pb2, pserver_pb2


def initial_row(table: str, row_id: int, dim: int) -> np.ndarray:
    """The stand-in's first value of a row: distinct per table, id and column."""
    base = (zlib.crc32(table.encode()) % 13 + 3 * row_id) % 17
    return (0.05 * (base + np.arange(dim, dtype=np.float32)) - 0.4).astype(np.float32)


def initial_table(table: str, size: int, dim: int) -> np.ndarray:
    return np.stack([initial_row(table, i, dim) for i in range(size)])


class SgdTables:
    """Dense and sparse tables with plain SGD, recording the order of calls."""

    def __init__(self, lr: float, dims: Mapping[str, int] | None = None) -> None:
        self.lr = lr
        self.dims = dict(dims or {})
        self.dense: dict[str, np.ndarray] = {}
        self.rows: dict[tuple[str, int], np.ndarray] = {}
        self.calls: list[str] = []
        self.pulled: list[tuple[str, np.ndarray]] = []  # (table, ids) of every sparse pull
        self.lock = threading.Lock()

    def declare_tables(self, specs: list[pserver_pb2.TableSpec]) -> None:
        self.calls.append("declare")
        for spec in specs:
            if spec.kind == pserver_pb2.TableSpec.SPARSE:
                self.dims[spec.name] = spec.dim

    def initialize(self, dense_values: dict[str, np.ndarray], init_fn: Any = None,
                   rows: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self.dense = {k: v.copy() for k, v in dense_values.items()}
        for table, (ids, values) in (rows or {}).items():
            for row_id, value in zip(ids, values, strict=True):
                self.rows[(table, int(row_id))] = np.array(value, dtype=np.float32)

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        with self.lock:
            self.calls.append("pull_dense")
            return {k: v.copy() for k, v in self.dense.items()}

    def _row(self, table: str, row_id: int) -> np.ndarray:
        key = (table, row_id)
        if key not in self.rows:
            self.rows[key] = initial_row(table, row_id, self.dims[table])
        return self.rows[key]

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        with self.lock:
            self.calls.append(f"pull_sparse {table}")
            self.pulled.append((table, np.array(ids)))
            if len(ids) == 0:
                return np.zeros((0, self.dims[table]), np.float32)
            return np.stack([self._row(table, int(i)).copy() for i in ids])

    def pull_held(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows and whether each was pushed (a pull of an unseen id keeps nothing here)."""
        with self.lock:
            held = np.array([(table, int(i)) in self.rows for i in ids], dtype=np.bool_)
        return self.pull_sparse(table, ids), held

    def push(self, batch: common_pb2.BatchRef, dense_grads: Mapping[str, np.ndarray],
             sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]],
             counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        with self.lock:
            self.calls.append(f"push {batch.seq}")
            self.counts = dict(counts or {})  # the last push's show/click counts
            self.pushed_ids = {t: ids for t, (ids, _) in sparse_grads.items()}
            for name, grad in dense_grads.items():
                self.dense[name] -= self.lr * grad
            for table, (ids, grads) in sparse_grads.items():
                for i, g in zip(ids, grads, strict=True):  # repeated ids add up, as on pservers
                    self._row(table, int(i))[:] -= self.lr * g

    def join_round(self, trainer: str) -> None:
        with self.lock:
            self.calls.append(f"join_round {trainer}")

    def leave_round(self, trainer: str) -> None:
        with self.lock:
            self.calls.append(f"leave_round {trainer}")

    def close(self) -> None:
        pass
