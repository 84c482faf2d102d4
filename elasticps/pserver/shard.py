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

How a push is taken depends on the job's mode and is decided once, when the shard is built: one
strategy per mode (push_mode.py: async gradients, sync rounds, geo deltas) owns that mode's
exactly-once rule; the shard gives it validation, the masks of earlier layouts
(reshard/lineage.py), the optimizer step and the record of applied batches.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from elasticps.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint.snapshot import DenseState, ShardSnapshot, SparseState
from elasticps.pserver.dense_table import DenseShard, normalize_spec
from elasticps.pserver.dense_tag import DenseTag, new_incarnation
from elasticps.pserver.limits import ShardLimits, declared_bytes
from elasticps.pserver.policy_clock import DEFAULT_PERIOD_S, PolicyClock
from elasticps.pserver.push_async import AsyncGradients
from elasticps.pserver.push_geo import GeoDeltas
from elasticps.pserver.push_hybrid import HybridSparse
from elasticps.pserver.push_mode import BatchKey, PushMode, PushResult, Rows
from elasticps.pserver.push_sync import SyncRoundPush
from elasticps.pserver.reshard.lineage import LegacyLayout, dense_done, sparse_done
from elasticps.pserver.sparse_table import (
    COUNTED,
    SparseCounters,
    SparsePlan,
    SparseTable,
    Table,
    make_table,
    table_counters,
)
from elasticps.store.keys import PSERVER_INIT_DONE

_RATE_WINDOW_S = 10.0
PULL_CHUNK = 1 << 16  # ids per lock hold in a pull: a huge pull never stalls pushes for long
_SWEEP_INTERVAL_S = 1.0  # TTL sweeps: at most this often, and whenever a new pass begins
# Sync mode: how long a push waits in an open round before it is answered ``pending`` (the
# client sends it again), well under the clients' call timeout.
SYNC_WAIT_S = 5.0

PUSH_MODES: dict[str, type[PushMode]] = {
    "async": AsyncGradients, "sync": SyncRoundPush, "geo": GeoDeltas, "hybrid": HybridSparse}

__all__ = ["PULL_CHUNK", "SYNC_WAIT_S", "BatchKey", "DensePull", "Masked", "PushResult",
           "ShardState", "ShardStats"]


@dataclass(frozen=True)
class Masked:
    """A push without what earlier layouts already applied of its batches (reshard/lineage.py)."""

    sparse: Rows  # the rows left to apply
    counts: Rows  # their show/click counts
    keep: dict[str, np.ndarray]  # per dense table: positions to leave as they are


@dataclass(frozen=True)
class DensePull:
    """A tagged read of dense tables: ``values`` is None when the caller's tag still holds."""

    values: dict[str, np.ndarray] | None
    tag: DenseTag
    pristine: bool  # no dense table has taken an optimizer step (initial optimizer state)


@dataclass(frozen=True)
class ShardStats:
    shard: int
    num_shards: int
    initialized: bool
    tables: list[tuple[str, int, int]]  # (name, rows, bytes)
    sparse: dict[str, SparseCounters]  # rows admitted and evicted, gradient rows dropped
    pushes: int
    pushes_per_sec: float
    duplicates: int
    skipped_nonfinite: int
    applied_batches: int
    restored_from: str
    mode: str = "async"
    rounds: int = 0  # sync: step barriers closed
    round_waiting: int = 0  # sync: pushes in the open round
    round_members: int = 0  # sync: trainers the open round waits for


class ShardState:
    """Tables, optimizer state and applied batches of shard ``shard`` of ``num_shards``."""

    def __init__(self, shard: int, num_shards: int, limits: ShardLimits | None = None,
                 clock: Callable[[], float] = time.monotonic, mode: str = "async",
                 stream_period_s: float = DEFAULT_PERIOD_S) -> None:
        if not 0 <= shard < num_shards:
            raise InvalidArgumentError(f"shard {shard} is not in [0, {num_shards})")
        self.shard, self.num_shards = shard, num_shards
        self.limits = limits or ShardLimits()
        self.clock = clock  # TTL eviction's time; a test steps it
        # Unix time: checkpoints keep push times in it (a test steps it with the clock).
        self.wall_clock: Callable[[], float] = time.time
        # The sparse policies' time and pass: the clocks above, or a stream's partition time.
        self.policy_clock = PolicyClock(lambda: self.clock(), lambda: self.wall_clock(),
                                        stream_period_s)
        self.current_pass = 0  # the newest (policy) pass pushed: TTL in passes counts from it
        self._last_sweep = clock()
        self.lock = threading.Lock()
        if mode not in PUSH_MODES:
            raise InvalidArgumentError(
                f"mode {mode!r} is not one of {', '.join(PUSH_MODES)}")
        self.mode = mode
        self.push_mode = PUSH_MODES[mode](self)  # push_mode.py: how this shard takes pushes
        self.tables: dict[str, Table] = {}
        self.initialized = False
        self.applied = AppliedSet()
        # Earlier layouts of a resharded job (reshard/lineage.py): what their shards had applied.
        self.legacy: list[LegacyLayout] = []
        self.pushes = 0
        self.duplicates = 0
        # Pushes of which an earlier layout had applied a part (reshard/lineage.py): a resharding
        # cut through them, and only the rest was applied here.
        self.partly_applied_before = 0
        # Geo windows refused whole because some (not all) of their batches were applied
        # before, here or on an earlier layout's shard: applying or masking either is wrong.
        self.windows_refused_partly_applied = 0
        self.skipped_nonfinite = 0
        self.version = 0  # bumped by every change; the checkpointer skips unchanged shards
        # The dense state's tag (dense_tag.py): bumped by every change of a dense table.
        self.incarnation = new_incarnation()
        self.dense_version = 0
        self.restored_from = ""
        self._recent: collections.deque[float] = collections.deque(maxlen=100_000)

    # -- tables -----------------------------------------------------------------------------

    def declare(self, specs: Iterable[pserver_pb2.TableSpec]) -> None:
        """Create tables; an identical re-declaration is a no-op, a conflicting one an error."""
        normalized = [normalize_spec(spec) for spec in specs]
        for spec in normalized:
            self.push_mode.check_declare(spec)
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
            fresh = [spec for spec in normalized if spec.name not in self.tables]
            self.limits.check_table_count(len(self.tables) + len(fresh))
            used = self._memory_bytes()
            for spec in fresh:
                used += declared_bytes(spec, self.shard, self.num_shards)
                self.limits.check_memory(spec.name, used, "declaring it",
                                         "declare smaller tables or raise the cap")
            created = False
            for spec in fresh:
                self.tables[spec.name] = make_table(spec, self.shard, self.num_shards,
                                                    self.limits.memory_bytes)
                created = True
            if created:
                self.version += 1
                self.dense_version += 1

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
                f"initialises the tables (InitDense) and the others wait for {PSERVER_INIT_DONE}"
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
            self.dense_version += 1
            return True

    def init_sparse(self, name: str, ids: np.ndarray, rows: np.ndarray) -> bool:
        """Start rows of sparse table ``name`` at ``rows`` (a warm start, before the shard is
        initialised); True, changing nothing, on a shard initialised already."""
        with self.lock:
            if self.initialized:
                return True
            table = self._sparse(name)
            table.check_ids(ids, "starting")
            table.check_rows(rows, ids.shape[0], "starting")
            if np.unique(ids).size != ids.size:
                raise InvalidArgumentError(f"starting rows of table {name!r} name an id twice")
            if not np.isfinite(rows).all():
                raise InvalidArgumentError(f"starting rows of table {name!r} hold NaN or Inf")
            policy_pass, now = self.policy_clock.at(self.current_pass)
            table.seed(ids, rows, policy_pass, now)
            self.version += 1
            return False

    def pull_dense(self, names: Iterable[str] = ()) -> dict[str, np.ndarray]:
        values = self.pull_dense_tagged(names).values
        assert values is not None
        return values

    def pull_dense_tagged(self, names: Iterable[str] = (), if_changed: DenseTag | None = None
                          ) -> DensePull:
        """The dense values with the tag of their state, read under one lock; no values when
        the state still has tag ``if_changed`` (the caller holds them already)."""
        with self.lock:
            self._require_initialized("dense pulls")
            wanted = list(names) or [n for n, t in self.tables.items() if isinstance(t, DenseShard)]
            tables = [self._dense(name) for name in wanted]
            tag = self.dense_tag()
            pristine = all(t.step == 0 for t in self.tables.values()
                           if isinstance(t, DenseShard))
            if if_changed == tag:
                return DensePull(None, tag, pristine)
            return DensePull({t.name: t.values.copy() for t in tables}, tag, pristine)

    def dense_tag(self) -> DenseTag:
        return DenseTag(self.incarnation, self.dense_version)

    # -- sparse -----------------------------------------------------------------------------

    def pull_sparse(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` in their order; an id without a row reads as its initial value and
        the table does not grow (rows come from pushes only). A pull of more than
        ``PULL_CHUNK`` ids takes the lock once per chunk, so a push may land between chunks."""
        return self.pull_held(name, ids, held=False)[0]

    def pull_held(self, name: str, ids: np.ndarray, held: bool = True
                  ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`pull_sparse`, and (when ``held``) whether each id has a row, read under the
        same lock as its value."""
        self.limits.check_ids(name, int(ids.shape[0]) if ids.ndim else 1, "pull")
        with self.lock:
            table = self._sparse(name)
            table.check_ids(ids, "pulled")
            if ids.shape[0] <= PULL_CHUNK:
                return table.gather(ids), table.held(ids) if held else None
        parts, marks = [], []
        for start in range(0, ids.shape[0], PULL_CHUNK):
            chunk = ids[start:start + PULL_CHUNK]
            with self.lock:
                parts.append(self._sparse(name).gather(chunk))
                if held:
                    marks.append(self._sparse(name).held(chunk))
        return np.concatenate(parts), np.concatenate(marks) if held else None

    # -- push -------------------------------------------------------------------------------

    def push(
        self,
        batch: BatchKey,
        dense: Mapping[str, np.ndarray],
        sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
        drop: bool = False,
        *,
        trainer: str = "",
        wait_s: float = SYNC_WAIT_S,
        counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> PushResult:
        """Apply one batch's gradients for this shard at most once, atomically (async mode:
        push_async.py). In sync mode the batch joins the open round instead, and the call
        returns once the round is applied, or after ``wait_s`` with ``pending=True`` (nothing
        applied yet: push_sync.py). ``counts``: per sparse table (shows, clicks) per id of its
        gradient, for SCORE tables."""
        batch.check()
        counts = counts or {}
        with self.lock:
            self._require_initialized("pushes")
            self.push_mode.check_kind(delta=False)
            self._validate(dense, sparse, counts)
            return self.push_mode.push(batch, dense, sparse, drop, counts, trainer, wait_s)

    def _validate(self, dense: Mapping[str, np.ndarray],
                  sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
                  counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        for name, grad in dense.items():
            self._dense(name).check_values(grad, "gradient")
        for name, (ids, rows) in sparse.items():
            table = self._sparse(name)
            self.limits.check_ids(name, int(ids.shape[0]) if ids.ndim else 1, "push")
            table.check_ids(ids, "pushed")
            table.check_rows(rows, ids.shape[0], "gradient")
        for name, (shows, clicks) in (counts or {}).items():
            if name not in sparse:
                raise InvalidArgumentError(f"show/click counts for table {name!r}, which the "
                                           "push holds no gradient of")
            self._sparse(name).check_counts(shows, clicks, sparse[name][0].shape[0])

    def push_delta(
        self,
        batches: list[BatchKey],
        dense: Mapping[str, np.ndarray],
        sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
    ) -> PushResult:
        """Geo mode: add a trainer's parameter deltas, which cover ``batches``, at most once;
        a window applied in part before, here or on an earlier layout's shard, is refused whole
        and recorded nowhere (push_geo.py)."""
        if not batches:
            raise InvalidArgumentError("a delta push must name the batches it covers")
        for batch in batches:
            batch.check()
        with self.lock:
            self._require_initialized("pushes")
            self.push_mode.check_kind(delta=True)
            self._validate(dense, sparse)
            return self.push_mode.push_delta(batches, dense, sparse)

    def mask_applied_before(self, batches: list[BatchKey], sparse: Rows, counts: Rows,
                            dense: Mapping[str, np.ndarray] | None = None) -> Masked | None:
        """After a resharding (reshard/lineage.py): ``sparse`` (and its show/click ``counts``)
        without the rows an earlier layout already applied ``batches`` to, and per dense table the
        positions to leave alone. None when, for some row or position the push touches
        (every dense table when ``dense`` is None), an earlier layout applied some of
        ``batches`` but not all: no mask makes that window exact (never for one batch)."""
        if not self.legacy:  # the push path's usual case: nothing to mask, nothing copied
            return Masked(sparse, counts, {})
        refs = [(b.pass_id, b.task_id, b.seq) for b in batches]
        kept: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        kept_counts = dict(counts)
        skipped = 0
        for name, (ids, rows) in sparse.items():
            mask = sparse_done(self.legacy, refs, ids)
            if not mask.exact:
                return None
            done = mask.done
            kept[name] = (ids[~done], rows[~done]) if done.any() else (ids, rows)
            if done.any() and name in counts:
                shows, clicks = counts[name]
                kept_counts[name] = (np.asarray(shows)[~done], np.asarray(clicks)[~done])
            skipped += int(done.sum())
        keep: dict[str, np.ndarray] = {}
        for name, table in self.tables.items():
            if isinstance(table, DenseShard) and (dense is None or name in dense):
                mask = dense_done(self.legacy, refs, math.prod(table.spec.shape), table.start,
                                  table.stop)
                if not mask.exact:
                    return None
                if mask.done.any():
                    keep[name] = mask.done
                    skipped += int(mask.done.sum())
        if skipped:
            self.partly_applied_before += 1
        return Masked(kept, kept_counts, keep)

    def apply_step(self, seed: int, dense: Mapping[str, np.ndarray],
               sparse: Mapping[str, tuple[np.ndarray, np.ndarray]], pass_id: int,
               delta: bool = False,
               counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
               keep: Mapping[str, np.ndarray] | None = None, batch_step: int = 0,
               event_time: float = 0.0) -> None:
        """One optimizer step of validated, finite gradients (or, geo, the deltas added),
        all or nothing. ``counts``: shows and clicks per id of SCORE tables. ``keep``: per
        dense table, positions left as they are (applied by an earlier layout).
        ``batch_step``: the batch's number in the job's data order (``BatchRef.step``), at
        which the learning-rate schedules are read. ``event_time``: a stream's partition
        time, which the sparse policies then count in (policy_clock.py)."""
        dense_tables = {name: self._dense(name) for name in dense}
        # Saved before computing: an optimizer may update its arrays in place.
        kept = {n: self._dense(n).values_at(mask) for n, mask in (keep or {}).items()
                if n in dense}
        sparse_tables = {name: self._sparse(name) for name in sparse}
        counts = counts or {}
        # Decide everything before changing anything: which ids get rows, which rows make
        # room for them (or RESOURCE_EXHAUSTED); then compute every update, then commit.
        plans = {n: t.plan(*sparse[n], seed, counts.get(n)) for n, t in sparse_tables.items()}
        victims = self._make_room(plans)
        for name, rows in victims.items():
            self._sparse(name).remove_rows(rows)
        policy_pass, now = self.policy_clock.at(pass_id, event_time)
        if policy_pass > self.current_pass:
            self._end_passes(policy_pass, plans)
        dense_updates = [(t, t.compute_delta(dense[n]) if delta
                          else t.compute(dense[n], batch_step))
                         for n, t in dense_tables.items()]
        sparse_updates = [(t, plans[n], t.compute_delta(plans[n]) if delta
                           else t.compute(plans[n], batch_step))
                          for n, t in sparse_tables.items()]
        for dense_table, dense_update in dense_updates:
            dense_table.commit(dense_update)
            if dense_table.name in kept:
                dense_table.put_back(kept[dense_table.name])
        if dense_updates:
            self.dense_version += 1
        for sparse_table, plan, sparse_update in sparse_updates:
            sparse_table.commit(sparse_update, plan, policy_pass, now)
        self._sweep(policy_pass, now)

    def record(self, batch: BatchKey, *, skipped: bool) -> None:
        self.applied.add(batch.pass_id, batch.task_id, batch.seq)
        if skipped:
            self.skipped_nonfinite += 1
        else:
            self.pushes += 1
            self._recent.append(time.monotonic())  # pushes/s counts batches in every mode
        self.version += 1

    # -- sync mode's step barrier (push_sync.py) ------------------------------------------

    def join_round(self, trainer: str) -> None:
        """Sync mode: the open round (and every later one) waits for ``trainer``'s push."""
        with self.lock:
            self.push_mode.join_round(trainer)

    def leave_round(self, trainer: str) -> bool:
        """``trainer`` is no longer waited for (sync mode; a no-op otherwise); closes the
        round if it waited only for it. True if it was a member."""
        with self.lock:
            return self.push_mode.leave_round(trainer)

    def round_members(self) -> set[str]:
        with self.lock:
            return self.push_mode.round_members()

    # -- capacity ---------------------------------------------------------------------------

    def _memory_bytes(self) -> int:
        return sum(t.footprint(t.size) if isinstance(t, SparseTable) else t.nbytes
                   for t in self.tables.values())

    def _make_room(self, plans: Mapping[str, SparsePlan]) -> dict[str, np.ndarray]:
        """Rows to evict so a push fits every table's max_rows and the shard's memory cap,
        sparing the rows the push trains; ResourceExhaustedError (nothing changed) if eviction
        cannot make room. Decides only: the caller evicts."""
        if not self.limits.memory_bytes and not any(
                self._sparse(n).policy.max_rows and p.new_rows for n, p in plans.items()):
            return {}  # nothing to make room for: spare the lookups below
        counts: dict[str, int] = {}
        protected = {n: self._sparse(n).protected_rows(p) for n, p in plans.items()}
        for name, plan in plans.items():
            table = self._sparse(name)
            limit = table.policy.max_rows
            if limit and table.size + plan.new_rows > limit:
                if plan.new_rows + protected[name].shape[0] > limit:
                    raise ResourceExhaustedError(
                        f"table {name!r}: one push trains {plan.new_rows} new and "
                        f"{protected[name].shape[0]} existing rows; the cap is max_rows={limit}")
                # Evict a little more than needed (1/64 of the cap), so a table at its cap does
                # not choose victims over all its rows on every push.
                counts[name] = table.size + plan.new_rows - limit + limit // 64
        victims = {n: self._sparse(n).choose_victims(c, protected[n], self.current_pass)
                   for n, c in counts.items()}
        if not self.limits.memory_bytes:
            return victims

        def projected() -> int:
            total = 0
            for name, table in self.tables.items():
                if not isinstance(table, SparseTable):
                    total += table.nbytes
                    continue
                plan, gone = plans.get(name), victims.get(name)
                evicting = gone.shape[0] if gone is not None else 0
                rows = table.size + (plan.new_rows if plan else 0) - evicting
                total += table.footprint(rows, evicting)
            return total

        excess = projected() - self.limits.memory_bytes
        evictable = sorted((t for t in self.tables.values()
                            if isinstance(t, SparseTable) and t.policy.evict),
                           key=lambda t: -t.size)
        for table in evictable:
            if excess <= 0:
                break
            have = victims.get(table.name, np.zeros(0, np.int64)).shape[0]
            more = -(-excess // table.row_bytes) + table.size // 64
            victims[table.name] = table.choose_victims(
                have + more, protected.get(table.name, np.zeros(0, np.int64)),
                self.current_pass)
            excess = projected() - self.limits.memory_bytes
        if excess > 0:
            name = max(plans, key=lambda n: plans[n].new_rows) if plans else "-"
            self.limits.check_memory(name, excess + self.limits.memory_bytes,
                                     f"a push of {sum(p.new_rows for p in plans.values())} "
                                     "new rows")
        return victims

    def _end_passes(self, pass_id: int, plans: Mapping[str, SparsePlan]) -> None:
        """Pass ``pass_id`` begins with this push: SCORE tables evict the rows whose score,
        decayed over the passes that ended, is below their threshold, sparing the rows this push
        trains (their plan holds). Runs once every decision of the push is made, so a push that
        is refused ends no pass."""
        for name, table in self.tables.items():
            if isinstance(table, SparseTable) and table.scores:
                plan = plans.get(name)
                spared = (table.protected_rows(plan) if plan is not None
                          else np.zeros(0, np.int64))
                table.end_pass(pass_id, spared)

    def _sweep(self, pass_id: int, now: float) -> None:
        """Evict rows past their TTL: when a new pass begins, and at most once a second."""
        new_pass = pass_id > self.current_pass
        self.current_pass = max(self.current_pass, pass_id)
        if not new_pass and now - self._last_sweep < _SWEEP_INTERVAL_S:
            return
        self._last_sweep = now
        for table in self.tables.values():
            if isinstance(table, SparseTable):
                table.expire(self.current_pass, now)

    def prune_applied(self, upto_pass: int) -> int:
        """Forget applied batches of passes < ``upto_pass`` (issue 7's pruning hook)."""
        with self.lock:
            removed = self.applied.prune(upto_pass)
            for layout in self.legacy:
                layout.prune(upto_pass)
            layouts = len(self.legacy)
            self.legacy = [layout for layout in self.legacy if not layout.empty]
            if removed or layouts != len(self.legacy):
                self.version += 1
            return removed

    # -- snapshot / restore -----------------------------------------------------------------

    def snapshot(self, delta: bool = False) -> tuple[ShardSnapshot, int]:
        """A consistent copy of the shard and the version it reflects. Only copies run under the
        lock; writing happens outside it so pushes continue.

        ``delta=True`` copies only the sparse rows pushed since the previous snapshot (and the
        ids evicted since), so the lock is held for time proportional to what changed; it
        gives a full snapshot instead when some evicted ids were not kept (``snap.delta``
        says which). Every snapshot starts a new "since"."""
        with self.lock:
            sparse_tables = [t for t in self.tables.values() if isinstance(t, SparseTable)]
            as_delta = delta and not any(t.tombstones_overflowed for t in sparse_tables)
            dense: dict[str, DenseState] = {}
            sparse: dict[str, SparseState] = {}
            tombstones: dict[str, np.ndarray] = {}
            for name, table in self.tables.items():
                if isinstance(table, DenseShard):
                    dense[name] = DenseState(
                        table.values.copy(), {k: v.copy() for k, v in table.slots.items()},
                        table.step)
                    continue
                sparse[name] = table.copy_rows(as_delta, *self.policy_clock.frame())
                evicted, _ = table.take_tombstones()
                if as_delta:
                    tombstones[name] = evicted
            snap = ShardSnapshot(
                shard=self.shard, num_shards=self.num_shards,
                specs=[t.spec for t in self.tables.values()], initialized=self.initialized,
                dense=dense, sparse=sparse, applied=self.applied.copy(),
                legacy=[layout.copy() for layout in self.legacy],
                counters={"pushes": self.pushes, "duplicates": self.duplicates,
                          "partly_applied_before": self.partly_applied_before,
                          "windows_refused_partly_applied":
                              self.windows_refused_partly_applied,
                          "skipped_nonfinite": self.skipped_nonfinite,
                          **table_counters(sparse_tables), **self.policy_clock.counters()},
                delta=as_delta, tombstones=tombstones,
            )
            return snap, self.version

    def restore(self, snap: ShardSnapshot, source: str) -> None:
        """Replace the whole state with a snapshot of this same slot. The shard takes the
        snapshot's arrays (they become its tables' storage; its sparse states are left empty):
        do not use the snapshot afterwards."""
        if (snap.shard, snap.num_shards) != (self.shard, self.num_shards):
            raise InvalidArgumentError(
                f"snapshot of shard {snap.shard} of {snap.num_shards} cannot restore shard "
                f"{self.shard} of {self.num_shards}"
            )
        tables: dict[str, Table] = {}
        passes = [p for p, _, _, _ in snap.applied.tasks()]
        self.policy_clock.restore(snap.counters)
        current_pass = (self.policy_clock.epoch if self.policy_clock.streaming
                        else max(passes) if passes else 0)
        for spec in snap.specs:
            table = make_table(normalize_spec(spec), self.shard, self.num_shards,
                               self.limits.memory_bytes)
            if isinstance(table, DenseShard):
                state = snap.dense[spec.name]
                table.values, table.slots, table.step = state.values, state.slots, state.step
            else:
                # The snapshot's arrays become the table's storage (no second copy).
                table.load(snap.sparse[spec.name], current_pass, *self.policy_clock.frame())
                table.admitted, table.evicted, table.dropped = (
                    snap.counters.get(f"sparse.{spec.name}.{what}", 0) for what in COUNTED)
            tables[spec.name] = table
        with self.lock:
            self.tables = tables
            self.current_pass = current_pass
            self.initialized = snap.initialized
            self.applied = snap.applied
            self.legacy = list(snap.legacy)
            self.pushes = snap.counters.get("pushes", 0)
            self.duplicates = snap.counters.get("duplicates", 0)
            self.partly_applied_before = snap.counters.get("partly_applied_before", 0)
            self.windows_refused_partly_applied = snap.counters.get(
                "windows_refused_partly_applied", 0)
            self.skipped_nonfinite = snap.counters.get("skipped_nonfinite", 0)
            self.restored_from = source
            self.version += 1
            self.dense_version += 1

    # -- stats ------------------------------------------------------------------------------

    def stats(self) -> ShardStats:
        with self.lock:
            now = time.monotonic()
            recent = sum(1 for t in self._recent if now - t <= _RATE_WINDOW_S)
            rounds = self.push_mode.round_stats()
            return ShardStats(
                shard=self.shard, num_shards=self.num_shards, initialized=self.initialized,
                tables=[(n, t.rows, t.nbytes) for n, t in self.tables.items()],
                sparse={n: t.counters() for n, t in self.tables.items()
                        if isinstance(t, SparseTable)},
                pushes=self.pushes, pushes_per_sec=recent / _RATE_WINDOW_S,
                duplicates=self.duplicates, skipped_nonfinite=self.skipped_nonfinite,
                applied_batches=len(self.applied), restored_from=self.restored_from,
                mode=self.mode, rounds=rounds.rounds, round_waiting=rounds.waiting,
                round_members=rounds.members,
            )


def _brief(spec: pserver_pb2.TableSpec) -> str:
    kind = pserver_pb2.TableSpec.Kind.Name(spec.kind)
    opt = pserver_pb2.OptimizerSpec.Kind.Name(spec.optimizer.kind)
    shape = list(spec.shape) if spec.kind == pserver_pb2.TableSpec.DENSE else f"dim={spec.dim}"
    return f"{kind} {shape} {opt} lr={spec.optimizer.lr}"
