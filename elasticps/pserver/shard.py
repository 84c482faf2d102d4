"""The state of one pserver shard and the only code that changes it.

One lock guards everything (tables, optimizer state, the applied-batch set, counters): a push
validates fully, then computes every table's update, then commits them all and records its batch
— all under the lock, so concurrent pushes are serialised and a push applies entirely or not at
all. numpy releases the GIL inside the heavy kernels, so the lock costs little next to the
arithmetic; a checkpoint holds it only to copy arrays.

Non-finite gradients: a push whose gradients hold NaN or Inf is *skipped* — nothing changes, the
batch is still recorded as applied (so a retry is not re-examined and exactly-once accounting
stays whole), ``skipped=true`` is returned and ``skipped_nonfinite`` counts it. A client that finds
non-finite values in any shard's part sends ``drop=true`` to every shard, so the whole batch is
dropped consistently.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from elasticps.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.tables import DenseShard, SparseTable, Table, make_table, normalize_spec

_RATE_WINDOW_S = 10.0


@dataclass(frozen=True)
class BatchKey:
    """One batch of one task in one pass: the unit of exactly-once application."""

    pass_id: int
    task_id: int
    seq: int

    def check(self) -> None:
        if min(self.pass_id, self.task_id, self.seq) < 0:
            raise InvalidArgumentError(
                f"batch (pass {self.pass_id}, task {self.task_id}, seq {self.seq}) has a "
                "negative field; every push needs a BatchRef with pass_id, task_id, seq >= 0"
            )


@dataclass(frozen=True)
class PushResult:
    applied: bool  # False: a duplicate of an applied batch
    skipped: bool  # True: dropped for non-finite values (still recorded as applied)


@dataclass
class DenseState:
    values: np.ndarray
    slots: dict[str, np.ndarray]
    step: int


@dataclass
class SparseState:
    ids: np.ndarray
    values: np.ndarray
    slots: dict[str, np.ndarray]
    steps: np.ndarray


@dataclass
class ShardSnapshot:
    """A consistent copy of a shard: what a checkpoint holds."""

    shard: int
    num_shards: int
    specs: list[pserver_pb2.TableSpec]
    initialized: bool
    dense: dict[str, DenseState]
    sparse: dict[str, SparseState]
    applied: AppliedSet
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardStats:
    shard: int
    num_shards: int
    initialized: bool
    tables: list[tuple[str, int, int]]  # (name, rows, bytes)
    pushes: int
    pushes_per_sec: float
    duplicates: int
    skipped_nonfinite: int
    applied_batches: int
    restored_from: str


class ShardState:
    """Tables, optimizer state and applied batches of shard ``shard`` of ``num_shards``."""

    def __init__(self, shard: int, num_shards: int) -> None:
        if not 0 <= shard < num_shards:
            raise InvalidArgumentError(f"shard {shard} is not in [0, {num_shards})")
        self.shard, self.num_shards = shard, num_shards
        self.lock = threading.Lock()
        self.tables: dict[str, Table] = {}
        self.initialized = False
        self.applied = AppliedSet()
        self.pushes = 0
        self.duplicates = 0
        self.skipped_nonfinite = 0
        self.version = 0  # bumped by every change; the checkpointer skips unchanged shards
        self.restored_from = ""
        self._recent: collections.deque[float] = collections.deque(maxlen=100_000)

    # -- tables -----------------------------------------------------------------------------

    def declare(self, specs: Iterable[pserver_pb2.TableSpec]) -> None:
        """Create tables; an identical re-declaration is a no-op, a conflicting one an error."""
        normalized = [normalize_spec(spec) for spec in specs]
        names = [spec.name for spec in normalized]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"table names repeat in one declaration: {names}")
        with self.lock:
            for spec in normalized:
                existing = self.tables.get(spec.name)
                if existing is not None and existing.spec != spec:
                    raise InvalidArgumentError(
                        f"table {spec.name!r} is already declared on shard {self.shard} with a "
                        f"different spec ({_brief(existing.spec)}; asked {_brief(spec)})"
                    )
            created = False
            for spec in normalized:
                if spec.name not in self.tables:
                    self.tables[spec.name] = make_table(spec, self.shard, self.num_shards)
                    created = True
            if created:
                self.version += 1

    def specs(self) -> list[pserver_pb2.TableSpec]:
        with self.lock:
            return [t.spec for t in self.tables.values()]

    def _table(self, name: str) -> Table:
        table = self.tables.get(name)
        if table is None:
            known = ", ".join(sorted(self.tables)) or "none"
            raise NotFoundError(
                f"table {name!r} is not declared on shard {self.shard} (declared: {known})"
            )
        return table

    def _dense(self, name: str) -> DenseShard:
        table = self._table(name)
        if not isinstance(table, DenseShard):
            raise InvalidArgumentError(f"table {name!r} is sparse; use the sparse calls")
        return table

    def _sparse(self, name: str) -> SparseTable:
        table = self._table(name)
        if not isinstance(table, SparseTable):
            raise InvalidArgumentError(f"table {name!r} is dense; use the dense calls")
        return table

    def _require_initialized(self, what: str) -> None:
        if not self.initialized:
            raise FailedPreconditionError(
                f"shard {self.shard} is not initialised yet, so it refuses {what}; one trainer "
                "initialises the tables (InitDense) and the others wait for pserver/init/done"
            )

    # -- dense ------------------------------------------------------------------------------

    def init_dense(self, values: Mapping[str, np.ndarray]) -> bool:
        """Set start values of dense slices and mark the shard initialised. A shard that is
        already initialised (by another trainer or a checkpoint) ignores the call."""
        with self.lock:
            if self.initialized:
                return True
            for name, array in values.items():
                self._dense(name).check_values(array, "initial values")
                if not np.isfinite(array).all():
                    raise InvalidArgumentError(f"initial values of {name!r} hold NaN or Inf")
            for name, array in values.items():
                self._dense(name).values = np.array(array, dtype=np.float32)
            self.initialized = True
            self.version += 1
            return True

    def pull_dense(self, names: Iterable[str] = ()) -> dict[str, np.ndarray]:
        with self.lock:
            self._require_initialized("dense pulls")
            wanted = list(names) or [n for n, t in self.tables.items() if isinstance(t, DenseShard)]
            tables = [self._dense(name) for name in wanted]
            return {t.name: t.values.copy() for t in tables}

    # -- sparse -----------------------------------------------------------------------------

    def pull_sparse(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` in their order; an id without a row reads as its initial value and
        the table does not grow (rows come from pushes only)."""
        with self.lock:
            table = self._sparse(name)
            table.check_ids(ids, "pulled")
            return table.gather(ids)

    # -- push -------------------------------------------------------------------------------

    def push(
        self,
        batch: BatchKey,
        dense: Mapping[str, np.ndarray],
        sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
        drop: bool = False,
    ) -> PushResult:
        """Apply one batch's gradients for this shard at most once, atomically."""
        batch.check()
        with self.lock:
            self._require_initialized("pushes")
            dense_tables = {name: self._dense(name) for name in dense}
            sparse_tables = {name: self._sparse(name) for name in sparse}
            for name, grad in dense.items():
                dense_tables[name].check_values(grad, "gradient")
            for name, (ids, rows) in sparse.items():
                sparse_tables[name].check_ids(ids, "pushed")
                sparse_tables[name].check_rows(rows, ids.shape[0], "gradient")
            if self.applied.contains(batch.pass_id, batch.task_id, batch.seq):
                self.duplicates += 1
                return PushResult(applied=False, skipped=False)
            finite = all(np.isfinite(g).all() for g in dense.values()) and all(
                np.isfinite(rows).all() for _, rows in sparse.values()
            )
            if drop or not finite:
                self.applied.add(batch.pass_id, batch.task_id, batch.seq)
                self.skipped_nonfinite += 1
                self.version += 1
                return PushResult(applied=True, skipped=True)
            # Compute every update before committing any, so a failure leaves no partial push.
            dense_updates = [(t, t.compute(dense[n])) for n, t in dense_tables.items()]
            sparse_updates = [(t, t.compute(*sparse[n])) for n, t in sparse_tables.items()]
            for dense_table, dense_update in dense_updates:
                dense_table.commit(dense_update)
            for sparse_table, sparse_update in sparse_updates:
                sparse_table.commit(sparse_update)
            self.applied.add(batch.pass_id, batch.task_id, batch.seq)
            self.pushes += 1
            self.version += 1
            self._recent.append(time.monotonic())
            return PushResult(applied=True, skipped=False)

    def prune_applied(self, upto_pass: int) -> int:
        """Forget applied batches of passes < ``upto_pass`` (issue 7's pruning hook)."""
        with self.lock:
            removed = self.applied.prune(upto_pass)
            if removed:
                self.version += 1
            return removed

    # -- snapshot / restore -----------------------------------------------------------------

    def snapshot(self) -> tuple[ShardSnapshot, int]:
        """A consistent copy of the shard and the version it reflects. Only copies run under the
        lock; writing happens outside it so pushes continue."""
        with self.lock:
            dense: dict[str, DenseState] = {}
            sparse: dict[str, SparseState] = {}
            for name, table in self.tables.items():
                if isinstance(table, DenseShard):
                    dense[name] = DenseState(
                        table.values.copy(), {k: v.copy() for k, v in table.slots.items()},
                        table.step)
                else:
                    n = table.size
                    sparse[name] = SparseState(
                        table.ids[:n].copy(), table.values[:n].copy(),
                        {k: v[:n].copy() for k, v in table.slots.items()},
                        table.steps[:n].copy())
            snap = ShardSnapshot(
                shard=self.shard, num_shards=self.num_shards,
                specs=[t.spec for t in self.tables.values()], initialized=self.initialized,
                dense=dense, sparse=sparse, applied=self.applied.copy(),
                counters={"pushes": self.pushes, "duplicates": self.duplicates,
                          "skipped_nonfinite": self.skipped_nonfinite},
            )
            return snap, self.version

    def restore(self, snap: ShardSnapshot, source: str) -> None:
        """Replace the whole state with a snapshot of this same slot."""
        if (snap.shard, snap.num_shards) != (self.shard, self.num_shards):
            raise InvalidArgumentError(
                f"snapshot of shard {snap.shard} of {snap.num_shards} cannot restore shard "
                f"{self.shard} of {self.num_shards}"
            )
        tables: dict[str, Table] = {}
        for spec in snap.specs:
            table = make_table(normalize_spec(spec), self.shard, self.num_shards)
            if isinstance(table, DenseShard):
                state = snap.dense[spec.name]
                table.values, table.slots, table.step = state.values, state.slots, state.step
            else:
                s = snap.sparse[spec.name]
                table.load(s.ids, s.values, s.slots, s.steps)
            tables[spec.name] = table
        with self.lock:
            self.tables = tables
            self.initialized = snap.initialized
            self.applied = snap.applied
            self.pushes = snap.counters.get("pushes", 0)
            self.duplicates = snap.counters.get("duplicates", 0)
            self.skipped_nonfinite = snap.counters.get("skipped_nonfinite", 0)
            self.restored_from = source
            self.version += 1

    # -- stats ------------------------------------------------------------------------------

    def stats(self) -> ShardStats:
        with self.lock:
            now = time.monotonic()
            recent = sum(1 for t in self._recent if now - t <= _RATE_WINDOW_S)
            return ShardStats(
                shard=self.shard, num_shards=self.num_shards, initialized=self.initialized,
                tables=[(n, t.rows, t.nbytes) for n, t in self.tables.items()],
                pushes=self.pushes, pushes_per_sec=recent / _RATE_WINDOW_S,
                duplicates=self.duplicates, skipped_nonfinite=self.skipped_nonfinite,
                applied_batches=len(self.applied), restored_from=self.restored_from,
            )


def _brief(spec: pserver_pb2.TableSpec) -> str:
    kind = pserver_pb2.TableSpec.Kind.Name(spec.kind)
    opt = pserver_pb2.OptimizerSpec.Kind.Name(spec.optimizer.kind)
    shape = list(spec.shape) if spec.kind == pserver_pb2.TableSpec.DENSE else f"dim={spec.dim}"
    return f"{kind} {shape} {opt} lr={spec.optimizer.lr}"
