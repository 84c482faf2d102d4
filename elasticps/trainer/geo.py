"""Geo mode: a trainer trains a local copy for k steps, then pushes what changed.

:class:`GeoParams` stands between the step runner and the pservers' client. The first pull of
a *window* fetches the dense values (and each sparse row the first time a batch needs it) and
keeps two copies: the base, as pulled, and the local copy the trainer trains. A push does not
leave the process: the table's own optimizer (``pserver/optimizers.py``, the same kernels the
pservers run) updates the local copy. After ``steps`` pushes, or when the trainer flushes (a
task ends, progress is reported), one delta push per shard carries ``local - base`` for the
dense tables and for the sparse rows the window touched, with every batch of the window as its
BatchRefs; the pservers add it (``ShardState.push_delta``), at most once, recording each batch
as async mode records its gradient. Then the window ends and the next pull starts a new one
from the pservers' values, which now hold every trainer's deltas.

Rows the window only read are not pushed (their delta is zero); the optimizer state of the
local copy lives for one window for sparse rows and for the whole run for dense tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from elasticps.errors import ConfigError
from elasticps.gradients import finite
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.dense_table import sum_duplicates
from elasticps.pserver.optimizers import Optimizer, config_from_spec, make_optimizer


class _LocalRows:
    """One sparse table's rows this window has pulled: base and trained copies and the local
    optimizer state, in arrival order (grown by doubling, so adding rows rarely copies), found
    through a sorted view of their ids."""

    def __init__(self, dim: int, slots: Sequence[str], slot_init: Mapping[str, float]) -> None:
        self.size = 0
        self.ids = np.zeros(0, np.int64)
        self.base = np.zeros((0, dim), np.float32)
        self.local = np.zeros((0, dim), np.float32)
        self.slots = {n: np.zeros((0, dim), np.float32) for n in slots}
        self.slot_init = dict(slot_init)
        self.steps = np.zeros(0, np.int64)
        self.touched = np.zeros(0, bool)
        self._sorted = np.zeros(0, np.int64)  # ids[:size] sorted
        self._order = np.zeros(0, np.int64)  # their positions

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, found) of ``ids``: positions are valid where found."""
        at = np.searchsorted(self._sorted, ids)
        at = np.minimum(at, max(self.size - 1, 0))
        found = (self._sorted[at] == ids) if self.size else np.zeros(ids.shape, bool)
        return self._order[at] if self.size else at, found

    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        n, k = self.size, ids.shape[0]
        if n + k > self.ids.shape[0]:
            capacity = max(2 * self.ids.shape[0], n + k, 1024)
            self.ids = _grown(self.ids, capacity, n)
            self.base, self.local = _grown(self.base, capacity, n), _grown(self.local, capacity, n)
            self.slots = {name: _grown(a, capacity, n) for name, a in self.slots.items()}
            self.steps, self.touched = _grown(self.steps, capacity, n), _grown(self.touched,
                                                                                capacity, n)
        new = slice(n, n + k)
        self.ids[new], self.base[new], self.local[new] = ids, rows, rows
        for name, arr in self.slots.items():
            arr[new] = self.slot_init[name]
        self.steps[new], self.touched[new] = 0, False
        self.size = n + k
        self._order = np.argsort(self.ids[:self.size], kind="stable")
        self._sorted = self.ids[:self.size][self._order]


def _grown(array: np.ndarray, capacity: int, keep: int) -> np.ndarray:
    out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[:keep] = array[:keep]
    return out


class GeoParams:
    """A :class:`~elasticps.trainer.api.ParameterClient` that trains locally and pushes deltas
    every ``steps`` pushes (see the module docstring). Not thread-safe: geo mode runs without
    prefetch, so one thread pulls and pushes."""

    def __init__(self, client: Any, steps: int) -> None:
        if steps < 1:
            raise ConfigError(f"geo steps={steps} must be >= 1")
        self.client, self.steps = client, steps
        self.num_shards = int(getattr(client, "num_shards", 1))
        self._optimizers: dict[str, Optimizer] = {}
        self._dense_slots: dict[str, dict[str, np.ndarray]] = {}
        self._dense_step: dict[str, int] = {}
        self._base: dict[str, np.ndarray] = {}
        self._local: dict[str, np.ndarray] = {}
        self._rows: dict[str, _LocalRows] = {}
        self._window: list[common_pb2.BatchRef] = []
        self.pushed = 0  # delta pushes sent (for tests and the benchmark)

    # -- passed through -----------------------------------------------------------------------

    def declare_tables(self, specs: list[pserver_pb2.TableSpec]) -> None:
        self.client.declare_tables(specs)

    def initialize(self, dense_values: dict[str, np.ndarray], init_fn: Any = None,
                   rows: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        self.client.initialize(dense_values, init_fn, rows=rows)

    def join_round(self, trainer: str) -> None:
        pass  # no barrier in geo mode

    def leave_round(self, trainer: str) -> None:
        pass

    def close(self) -> None:
        self.flush()

    def pull_held(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the pservers hold (an export's view): the window's deltas go out first."""
        self.flush()
        held: tuple[np.ndarray, np.ndarray] = self.client.pull_held(table, ids)
        return held

    # -- the local copy -------------------------------------------------------------------------

    def _optimizer(self, name: str) -> Optimizer:
        optimizer = self._optimizers.get(name)
        if optimizer is None:
            spec = self.client.specs()[name]
            optimizer = make_optimizer(config_from_spec(spec.optimizer, name))
            self._optimizers[name] = optimizer
        return optimizer

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        wanted = list(names) if names is not None else None
        missing = [n for n in wanted if n not in self._local] if wanted is not None else None
        if wanted is None or missing:
            for name, values in self.client.pull_dense(missing).items():
                self._base[name] = values.copy()
                self._local[name] = values.copy()
        keys = wanted if wanted is not None else list(self._local)
        return {name: self._local[name].copy() for name in keys}

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        held = self._rows.get(table)
        if held is None:
            optimizer = self._optimizer(table)
            held = _LocalRows(int(self.client.specs()[table].dim), optimizer.slots,
                              {n: optimizer.slot_init(n) for n in optimizer.slots})
            self._rows[table] = held
        _, found = held.find(ids)
        if not found.all():
            new = np.unique(ids[~found])
            held.add(new, self.client.pull_sparse(table, new))
        at, _ = held.find(ids)
        return held.local[at]

    def push(self, batch: common_pb2.BatchRef, dense_grads: Mapping[str, np.ndarray],
             sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]],
             counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """One local optimizer step (a batch with NaN/Inf is dropped, as the pservers would);
        the window's deltas go out after ``steps`` of them. Show/click ``counts`` are not
        carried: a SCORE table counts each id of a delta as shown once."""
        if finite(dense_grads, sparse_grads):
            for name, grad in dense_grads.items():
                self._step_dense(name, grad, batch.step)
            for table, (ids, grads) in sparse_grads.items():
                self._step_rows(table, np.asarray(ids, np.int64), np.asarray(grads, np.float32),
                                batch.step)
        self._window.append(batch)
        if len(self._window) >= self.steps:
            self.flush()

    def _step_dense(self, name: str, grad: np.ndarray, batch_step: int) -> None:
        optimizer = self._optimizer(name)
        values = self._local[name]
        flat = values.reshape(-1)
        slots = self._dense_slots.setdefault(
            name, {n: np.full(flat.shape, optimizer.slot_init(n), np.float32)
                   for n in optimizer.slots})
        self._dense_step[name] = self._dense_step.get(name, 0) + 1
        step = np.array([self._dense_step[name]], dtype=np.int64)
        new, self._dense_slots[name] = optimizer.step(
            flat, np.ascontiguousarray(grad, np.float32).reshape(-1), slots, step,
            optimizer.lr_at(batch_step))
        self._local[name] = new.astype(np.float32, copy=False).reshape(values.shape)

    def _step_rows(self, table: str, ids: np.ndarray, grads: np.ndarray,
                   batch_step: int) -> None:
        if not ids.size:
            return
        unique, summed = sum_duplicates(ids, grads)
        held = self._rows[table]
        at, found = held.find(unique)
        if not found.all():  # a gradient for a row this window never pulled
            raise ConfigError(f"geo mode: table {table!r} got gradients for ids it did not "
                              f"pull, e.g. {unique[~found][:3].tolist()}")
        steps = held.steps[at] + 1
        optimizer = self._optimizer(table)
        values, slots = optimizer.step(
            held.local[at], summed, {n: a[at] for n, a in held.slots.items()}, steps[:, None],
            optimizer.lr_at(batch_step))
        held.local[at] = values
        for name, arr in slots.items():
            held.slots[name][at] = arr
        held.steps[at] = steps
        held.touched[at] = True

    def flush(self) -> None:
        """Push the window's deltas now (if it trained anything) and start a new window."""
        window, self._window = self._window, []
        if window:
            dense = {name: self._local[name] - self._base[name] for name in self._local}
            sparse = {}
            for table, held in self._rows.items():
                touched = np.flatnonzero(held.touched[:held.size])
                if touched.size:
                    sparse[table] = (held.ids[touched], held.local[touched] - held.base[touched])
            self.client.push_delta(window, dense, sparse)
            self.pushed += 1
        self._base.clear()
        self._local.clear()
        self._rows.clear()

