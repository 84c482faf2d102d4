"""A sparse table: embedding rows of the ids one shard owns (``id % N == shard``).

Rows live in arrays in creation order (values, one array per optimizer slot, ids, Adam's per-row
step, and for tables that evict: the pass and time of each row's last push and its push count);
an index maps ``id // N`` to the row number. Only pushes create rows, after admission
(:mod:`~elasticps.pserver.sparse_policy`). An evicted row's place is filled by the last row
(swap-remove), so rows stay contiguous and evicting k rows costs O(k), not a rebuild.

Arrays grow by 1.5x, except when the table's row count is bounded (``max_rows`` or the shard's
memory cap): then they are allocated once at the bound, and the OS commits pages only as rows
are written, so memory follows the rows held and never doubles during a growth copy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.hashing import splitmix64
from elasticps.proto import pserver_pb2
from elasticps.pserver import sparse_policy
from elasticps.pserver.checkpoint.snapshot import RowBookkeeping, RowScores, SparseState
from elasticps.pserver.dense_table import (
    MAX_DIRECT_IDS,
    DenseShard,
    TableSpec,
    initial_values,
    strictly_increasing,
    sum_duplicates,
)
from elasticps.pserver.hashing import uniform01
from elasticps.pserver.index import DirectIndex, HashIndex, RowIndex
from elasticps.pserver.optimizers import Optimizer, config_from_spec, make_optimizer
from elasticps.pserver.routing import route_ids
from elasticps.pserver.row_access import put_rows, take_rows

MAX_TOMBSTONES = 1 << 20  # evicted ids kept for the next delta; beyond it the delta is a full one
_TRACK_BYTES = 4 + 8 + 4  # touched_pass int32, touched_at float64, hits uint32
_SCORE_BYTES = 4 + 4 + 4  # shows float32, clicks float32, score_pass int32
Policy = pserver_pb2.SparsePolicy


@dataclass(frozen=True)
class SparsePlan:
    """One table's part of a push, decided before anything changes."""

    unique: np.ndarray  # sorted unique ids
    summed: np.ndarray  # their summed gradients
    present: np.ndarray  # bool per id: it has a row now
    admitted: np.ndarray  # bool per id: it gets a row with this push
    shows: np.ndarray | None = None  # SCORE tables: examples showing each id (float32)
    clicks: np.ndarray | None = None  # and the positive ones among them

    @property
    def new_rows(self) -> int:
        return int(np.count_nonzero(self.admitted))

    @property
    def dropped(self) -> int:
        """Gradient rows dropped: ids without a row that admission turned away."""
        return int(self.unique.shape[0] - np.count_nonzero(self.present | self.admitted))


@dataclass(frozen=True)
class SparseCounters:
    admitted: int
    evicted: int
    dropped: int


class SparseTable:
    """Rows of one sparse table on one shard, with admission and eviction."""

    kind = TableSpec.SPARSE

    def __init__(self, spec: pserver_pb2.TableSpec, shard: int, num_shards: int,
                 memory_cap: int = 0) -> None:
        self.spec = spec
        self.name = spec.name
        self.dim = int(spec.dim)
        self.id_space = int(spec.id_space)
        self.shard, self.num_shards = shard, num_shards
        self.policy = spec.policy
        self.optimizer: Optimizer = make_optimizer(config_from_spec(spec.optimizer, spec.name))
        self.uses_step = self.optimizer.counts_steps
        self.tracks = sparse_policy.tracks_rows(self.policy)
        self.scores = self.policy.evict == Policy.SCORE
        local_ids = -(-(self.id_space - shard) // num_shards) if self.id_space else 0
        self.index: RowIndex = (
            DirectIndex(local_ids)
            if self.id_space and local_ids <= MAX_DIRECT_IDS
            else HashIndex()
        )
        self.sketch = (sparse_policy.CountMinSketch() if self.policy.admit_after > 1 else None)
        bounds = [b for b in (self.policy.max_rows, memory_cap // self.row_bytes) if b > 0]
        self.max_capacity = min(bounds) if bounds else 0  # 0: grow by 1.5x without bound
        self.admitted = self.evicted = self.dropped = 0
        self._tombstones: list[np.ndarray] = []
        self._tombstone_count = 0
        self.tombstones_overflowed = False
        self.size = 0
        self._allocate(0)

    # -- storage ----------------------------------------------------------------------------

    @property
    def row_bytes(self) -> int:
        """Bytes one row holds: id, value, optimizer slots, step, eviction bookkeeping."""
        floats = self.dim * (1 + len(self.optimizer.slots))
        return 9 + 4 * floats + (4 if self.uses_step else 0) + (
            _TRACK_BYTES if self.tracks else 0) + (_SCORE_BYTES if self.scores else 0)

    def _allocate(self, capacity: int) -> None:
        self.ids = np.empty(capacity, dtype=np.int64)
        self.values = np.empty((capacity, self.dim), dtype=np.float32)
        self.slots = {n: np.empty((capacity, self.dim), dtype=np.float32)
                      for n in self.optimizer.slots}
        self.steps = np.empty(capacity if self.uses_step else 0, dtype=np.int32)
        self.changed = np.empty(capacity, dtype=np.bool_)  # pushed since the last snapshot
        tracked = capacity if self.tracks else 0
        self.touched_pass = np.empty(tracked, dtype=np.int32)
        self.touched_at = np.empty(tracked, dtype=np.float64)
        self.hits = np.empty(tracked, dtype=np.uint32)
        scored = capacity if self.scores else 0
        self.shows = np.empty(scored, dtype=np.float32)
        self.clicks = np.empty(scored, dtype=np.float32)
        self.score_pass = np.empty(scored, dtype=np.int32)

    def _row_arrays(self) -> list[np.ndarray]:
        arrays: list[np.ndarray] = [self.ids, self.values, self.changed,
                                    *self.slots.values()]
        if self.uses_step:
            arrays.append(self.steps)
        if self.tracks:
            arrays += [self.touched_pass, self.touched_at, self.hits]
        if self.scores:
            arrays += [self.shows, self.clicks, self.score_pass]
        return arrays

    def _reserve(self, needed: int) -> None:
        if needed <= self.ids.shape[0]:
            return
        if self.max_capacity:
            # Allocated once at the bound: pages are committed only as rows are written.
            capacity = max(needed, self.max_capacity)
        else:
            capacity = max(needed, self.ids.shape[0] * 3 // 2, 1024)
        old = self._row_arrays()
        self._allocate(capacity)
        n = self.size
        for new, previous in zip(self._row_arrays(), old, strict=True):
            new[:n] = previous[:n]

    def footprint(self, rows: int, evicting: int = 0) -> int:
        """Bytes this table holds with ``rows`` rows (after evicting ``evicting``): rows, index
        and sketch."""
        sketch = self.sketch.nbytes if self.sketch is not None else 0
        return rows * self.row_bytes + self.index.bytes_for(rows, evicting) + sketch

    # -- validation -------------------------------------------------------------------------

    def check_ids(self, ids: np.ndarray, what: str) -> None:
        """Every id must be in range and belong to this shard; otherwise name the first bad one."""
        if ids.ndim != 1 or ids.dtype != np.int64:
            raise InvalidArgumentError(
                f"{what} ids for table {self.name!r} must be int64 [n], got {ids.dtype} "
                f"{list(ids.shape)}"
            )
        if ids.size == 0:
            return
        bad = ids < 0
        if self.id_space:
            bad |= ids >= self.id_space
        if bad.any():
            first = int(ids[np.flatnonzero(bad)[0]])
            limit = f"[0, {self.id_space})" if self.id_space else "[0, 2^63)"
            raise InvalidArgumentError(
                f"{what} id {first} for table {self.name!r} is outside the id space {limit}"
            )
        foreign = route_ids(ids, self.num_shards) != self.shard
        if foreign.any():
            first = int(ids[np.flatnonzero(foreign)[0]])
            raise InvalidArgumentError(
                f"{what} id {first} for table {self.name!r} belongs to shard "
                f"{first % self.num_shards}, not shard {self.shard} of {self.num_shards} "
                "(ids shard by id % N)"
            )

    def check_rows(self, rows: np.ndarray, n: int, what: str) -> None:
        if rows.dtype != np.float32 or rows.shape != (n, self.dim):
            raise InvalidArgumentError(
                f"{what} rows for table {self.name!r} must be float32 [{n}, {self.dim}], "
                f"got {rows.dtype} {list(rows.shape)}"
            )

    def check_counts(self, shows: np.ndarray, clicks: np.ndarray, n: int) -> None:
        """Show/click counts of a push: float32 [n] each, finite, 0 <= click <= show."""
        for what, array in (("shows", shows), ("clicks", clicks)):
            if array.dtype != np.float32 or array.shape != (n,):
                raise InvalidArgumentError(
                    f"{what} for table {self.name!r} must be float32 [{n}] (one per pushed id), "
                    f"got {array.dtype} {list(array.shape)}")
        bad = ~np.isfinite(shows) | ~np.isfinite(clicks) | (clicks < 0) | (clicks > shows)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidArgumentError(
                f"table {self.name!r}: show {float(shows[i])} / click {float(clicks[i])} at "
                f"position {i} of the pushed ids must be finite with 0 <= click <= show")

    # -- reads ------------------------------------------------------------------------------

    def lookup(self, unique_ids: np.ndarray) -> np.ndarray:
        """Row numbers of ids (-1 where an id has no row)."""
        return self.index.lookup(unique_ids // self.num_shards)

    def held(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id has a row (an export holds only those)."""
        return self.lookup(ids) >= 0

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` in their order (duplicates allowed). An id with no row gets its
        initial value, computed and not stored: only pushes create rows, so pulling ids that
        are never trained costs no memory."""
        if strictly_increasing(ids):  # a trainer's pull: its unique ids, sorted
            return self._gather_unique(ids)
        unique, inverse = np.unique(ids, return_inverse=True)
        return self._gather_unique(unique)[inverse]

    def _gather_unique(self, unique: np.ndarray) -> np.ndarray:
        rows = self.lookup(unique)
        present = rows >= 0
        if present.all():
            return take_rows(self.values, rows)
        out = initial_values(self.spec.initializer, unique, self.dim)
        out[present] = take_rows(self.values, rows[present])
        return out

    # -- a push: plan (pure), compute, commit -----------------------------------------------

    def plan(self, ids: np.ndarray, grads: np.ndarray, batch_seed: int,
             counts: tuple[np.ndarray, np.ndarray] | None = None) -> SparsePlan:
        """Which ids train and which get a row, changing nothing. ``counts``: shows and clicks
        per id of ``ids`` (SCORE tables; None: each id shown once, no click)."""
        unique, summed = sum_duplicates(ids, grads)
        shows = clicks = None
        if self.scores:
            shows, clicks = _summed_counts(ids, unique, counts)
        present = self.lookup(unique) >= 0
        absent = unique[~present]
        estimates = self.sketch.estimate(absent) if self.sketch is not None else None
        draws = (uniform01(batch_seed, absent, 1, 7)[:, 0]
                 if self.policy.admit_probability else None)
        admitted = np.zeros(unique.shape[0], dtype=bool)
        if absent.size:
            admitted[~present] = sparse_policy.admission(
                self.policy, absent.shape[0], estimates, draws)
        return SparsePlan(unique, summed, present, admitted, shows, clicks)

    def protected_rows(self, plan: SparsePlan) -> np.ndarray:
        """Row numbers the push trains: eviction must leave them."""
        rows = self.lookup(plan.unique[plan.present])
        return rows[rows >= 0]

    def compute(
        self, plan: SparsePlan, batch_step: int = 0
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
        """The optimizer's update of the rows the push trains (admitted rows are created, with
        their initial values: not a visible change), not yet committed. ``batch_step``: the
        batch's number, which the learning-rate schedule reads."""
        train = plan.present | plan.admitted
        ids, grads = plan.unique[train], plan.summed[train]
        rows = self._ensure_rows(ids)
        steps = (take_rows(self.steps, rows) + 1 if self.uses_step
                 else np.ones(rows.shape[0], np.int32))
        param, slots = self.optimizer.step(
            take_rows(self.values, rows), grads,
            {n: take_rows(a, rows) for n, a in self.slots.items()}, steps[:, None],
            self.optimizer.lr_at(batch_step))
        return rows, param, slots, steps if self.uses_step else None

    def compute_delta(
        self, plan: SparsePlan
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray | None]:
        """Geo mode: the rows plus a trainer's summed deltas (a row the trainer pulled without
        one started from its initial value, as it does here); optimizer state is left alone."""
        train = plan.present | plan.admitted
        rows = self._ensure_rows(plan.unique[train])
        steps = self.steps[rows] if self.uses_step else None
        return (rows, self.values[rows] + plan.summed[train],
                {n: a[rows] for n, a in self.slots.items()}, steps)

    def commit(
        self, update: tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray | None],
        plan: SparsePlan, pass_id: int, now: float,
    ) -> None:
        rows, param, slots, steps = update
        put_rows(self.values, rows, param)
        for name, arr in slots.items():
            put_rows(self.slots[name], rows, arr)
        if steps is not None:
            self.steps[rows] = steps
        self.changed[rows] = True
        if self.tracks:
            self.touched_pass[rows] = min(pass_id, np.iinfo(np.int32).max)
            self.touched_at[rows] = now
            self.hits[rows] += 1
        if self.scores:
            self._add_counts(rows, plan, pass_id)
        if self.sketch is not None:
            self.sketch.add(plan.unique[~plan.present])
        self.admitted += plan.new_rows
        self.dropped += plan.dropped

    def seed(self, ids: np.ndarray, rows: np.ndarray, pass_id: int, now: float) -> None:
        """Start rows at given values (a warm start from an export): each id becomes a row
        holding its values, with fresh optimizer state, as pushed once now and shown once.
        The caller checked the ids (this shard's, each once) and the rows."""
        if self.policy.max_rows and self.size + ids.size > self.policy.max_rows:
            raise InvalidArgumentError(
                f"table {self.name!r}: {ids.size} starting rows do not fit max_rows="
                f"{self.policy.max_rows} next to the {self.size} it holds")
        new = int(np.count_nonzero(self.lookup(ids) < 0))
        at = self._ensure_rows(ids)
        self.values[at] = rows
        self.changed[at] = True
        if self.tracks:
            self.touched_pass[at] = min(pass_id, np.iinfo(np.int32).max)
            self.touched_at[at] = now
            self.hits[at] = 1
        if self.scores:
            self.shows[at], self.clicks[at] = 1.0, 0.0
            self.score_pass[at] = pass_id
        self.admitted += new

    def _ensure_rows(self, unique_ids: np.ndarray) -> np.ndarray:
        keys = unique_ids // self.num_shards
        rows = self.index.lookup(keys)
        missing = rows < 0
        if missing.any():
            new_ids = unique_ids[missing]
            count = new_ids.shape[0]
            new_rows = np.arange(self.size, self.size + count, dtype=np.int64)
            self._reserve(self.size + count)
            self.ids[new_rows] = new_ids
            self.values[new_rows] = initial_values(self.spec.initializer, new_ids, self.dim)
            for name, arr in self.slots.items():
                arr[new_rows] = self.optimizer.slot_init(name)
            if self.uses_step:
                self.steps[new_rows] = 0
            if self.tracks:
                self.touched_pass[new_rows], self.touched_at[new_rows] = 0, 0.0
                self.hits[new_rows] = 0
            if self.scores:
                self.shows[new_rows], self.clicks[new_rows] = 0.0, 0.0
                self.score_pass[new_rows] = 0
            self.index.insert(keys[missing], new_rows)
            self.size += count
            rows[missing] = new_rows
        return rows

    def _add_counts(self, rows: np.ndarray, plan: SparsePlan, pass_id: int) -> None:
        """Add a push's shows and clicks to its rows' counts, first decaying them to the
        newer of their pass and the push's (a late push of an older pass decays nothing)."""
        assert plan.shows is not None
        assert plan.clicks is not None
        train = plan.present | plan.admitted
        at = np.maximum(self.score_pass[rows], min(pass_id, np.iinfo(np.int32).max))
        since = self.score_pass[rows]
        self.shows[rows] = sparse_policy.decayed(self.policy, self.shows[rows], since, at) + \
            plan.shows[train]
        self.clicks[rows] = sparse_policy.decayed(self.policy, self.clicks[rows], since, at) + \
            plan.clicks[train]
        self.score_pass[rows] = at

    # -- eviction ---------------------------------------------------------------------------

    def row_scores(self, current_pass: int) -> np.ndarray:
        """Every row's show/click score as of ``current_pass`` (SCORE tables)."""
        n = self.size
        since = self.score_pass[:n]
        return sparse_policy.show_click_score(
            self.policy, sparse_policy.decayed(self.policy, self.shows[:n], since, current_pass),
            sparse_policy.decayed(self.policy, self.clicks[:n], since, current_pass))

    def choose_victims(self, count: int, protected: np.ndarray,
                       current_pass: int = 0) -> np.ndarray:
        """The ``count`` rows (at most) the policy evicts first, none in ``protected``."""
        if not self.policy.evict or count <= 0:
            return np.zeros(0, dtype=np.int64)
        n = self.size
        scores = self.row_scores(current_pass) if self.scores else None
        return sparse_policy.victims(self.policy, self.hits[:n], self.touched_at[:n], count,
                                     np.unique(protected), self.ids[:n], scores)

    def end_pass(self, current_pass: int, protected: np.ndarray) -> int:
        """A pass ended and ``current_pass`` began: evict the rows whose decayed score is now
        below the threshold, except ``protected`` (the rows the push that began it trains);
        returns how many."""
        if not self.scores or not self.size:
            return 0
        rows = sparse_policy.below_threshold(self.policy, self.row_scores(current_pass),
                                             protected)
        self.remove_rows(rows)
        return int(rows.shape[0])

    def expire(self, current_pass: int, now: float) -> int:
        """Evict rows past their TTL; returns how many."""
        if not (self.policy.ttl_passes or self.policy.ttl_seconds) or not self.size:
            return 0
        n = self.size
        rows = sparse_policy.expired(self.policy, self.touched_pass[:n], self.touched_at[:n],
                                     current_pass, now)
        self.remove_rows(rows)
        return int(rows.shape[0])

    def remove_rows(self, victims: np.ndarray) -> None:
        """Evict rows (sorted unique row numbers): the last rows move into their places."""
        k = int(victims.shape[0])
        if k == 0:
            return
        n = self.size
        keep = n - k
        evicted_ids = self.ids[victims].copy()
        tail = np.arange(keep, n, dtype=np.int64)
        movers = tail[~np.isin(tail, victims, assume_unique=True)]
        holes = victims[victims < keep]
        self.index.delete(evicted_ids // self.num_shards)
        for arr in self._row_arrays():
            arr[holes] = arr[movers]
        self.index.reassign(self.ids[holes] // self.num_shards, holes)
        self.size = keep
        self.evicted += k
        self._record_tombstones(evicted_ids)

    def _record_tombstones(self, ids: np.ndarray) -> None:
        if self._tombstone_count + ids.shape[0] > MAX_TOMBSTONES:
            self._tombstones, self._tombstone_count = [], 0
            self.tombstones_overflowed = True
            return
        self._tombstones.append(ids)
        self._tombstone_count += ids.shape[0]

    def take_tombstones(self) -> tuple[np.ndarray, bool]:
        """(ids evicted since the last call, whether some were lost to the bound: the next
        delta must then be a full copy), and forget them."""
        ids = (np.concatenate(self._tombstones) if self._tombstones
               else np.zeros(0, dtype=np.int64))
        overflowed = self.tombstones_overflowed
        self._tombstones, self._tombstone_count, self.tombstones_overflowed = [], 0, False
        return ids, overflowed

    # -- snapshots --------------------------------------------------------------------------

    def copy_rows(self, changed_only: bool, now: float = 0.0,
                  wall: float = 0.0) -> SparseState:
        """A copy of every row, or of the rows pushed since the last copy (a delta); either way
        the change marks start over. ``now`` (the shard's clock) and ``wall`` (unix time) turn
        the rows' push times into unix seconds, which outlive this process."""
        n = self.size
        rows = np.flatnonzero(self.changed[:n]) if changed_only else slice(0, n)
        state = SparseState(
            self.ids[rows].copy(), self.values[rows].copy(),
            {k: v[rows].copy() for k, v in self.slots.items()},
            self.steps[rows].copy() if self.uses_step else self.steps[:0].copy(),
            self._bookkeeping(rows, now, wall))
        self.changed[:n] = False
        return state

    def _bookkeeping(self, rows: np.ndarray | slice, now: float,
                     wall: float) -> RowBookkeeping | None:
        if not self.tracks and self.sketch is None:
            return None
        tracked = rows if self.tracks else slice(0, 0)
        scores = RowScores(self.shows[rows].copy(), self.clicks[rows].copy(),
                           self.score_pass[rows].copy()) if self.scores else None
        return RowBookkeeping(
            self.touched_pass[tracked].copy(), self.touched_at[tracked] + (wall - now),
            self.hits[tracked].copy(),
            None if self.sketch is None else self.sketch.counters.copy(),
            0 if self.sketch is None else self.sketch.since_aging, scores)

    # -- restore ----------------------------------------------------------------------------

    def load(self, state: SparseState, current_pass: int = 0, now: float | None = None,
             wall: float | None = None) -> None:
        """Replace every row with a snapshot's (a restore), trusted to be checksummed and
        consistent. The table **takes the state's arrays**: one that fits (dtype, C order, as
        many rows as the table's capacity: any table without a row bound) becomes the table's
        storage as it is; another is copied into a new array and the state lets go of its own
        at once, so a restore holds at most one of the snapshot's arrays next to the table's.
        The state is left empty. With bookkeeping rows keep their last pass, push time
        (``wall``: unix time now), count and scores, and the sketch its counts; without (an
        older checkpoint) restored rows count as pushed once, now, and shown once."""
        n = state.ids.shape[0]
        capacity = max(n, self.max_capacity)
        self.index = (
            DirectIndex(self.index.capacity) if isinstance(self.index, DirectIndex)
            else HashIndex(2 * n)
        )
        self.size = 0
        self._allocate(0)  # the old rows go before the new ones arrive
        book, state.bookkeeping = state.bookkeeping, None
        self.ids, state.ids = _adopt(state.ids, capacity, np.int64), _EMPTY
        self.index.insert(self.ids[:n] // self.num_shards, np.arange(n, dtype=np.int64))
        self.values, state.values = _adopt(state.values, capacity, np.float32), _EMPTY
        for name in list(self.slots):
            self.slots[name] = _adopt(state.slots.pop(name), capacity, np.float32)
        if self.uses_step:
            self.steps = _adopt(state.steps, capacity, np.int32)
        state.steps = _EMPTY
        self.changed = np.zeros(capacity, dtype=np.bool_)
        now = time.monotonic() if now is None else now
        self._load_bookkeeping(book, n, capacity, current_pass, now,
                               (time.time() if wall is None else wall))
        self.size = n

    def _load_bookkeeping(self, book: RowBookkeeping | None, n: int, capacity: int,
                          current_pass: int, now: float, wall: float) -> None:
        kept = book is not None and book.hits.shape[0] == n
        at_pass = min(current_pass, np.iinfo(np.int32).max)
        if self.tracks and kept:
            assert book is not None
            self.touched_pass = _adopt(book.touched_pass, capacity, np.int32)
            self.touched_at = _adopt(book.pushed_unix, capacity, np.float64)
            self.touched_at[:n] += now - wall  # unix seconds -> this process's clock
            self.hits = _adopt(book.hits, capacity, np.uint32)
        elif self.tracks:
            self.touched_pass = np.full(capacity, at_pass, dtype=np.int32)
            self.touched_at = np.full(capacity, now, dtype=np.float64)
            self.hits = np.ones(capacity, dtype=np.uint32)
        scores = book.scores if book is not None else None
        if self.scores and scores is not None and scores.shows.shape[0] == n:
            self.shows = _adopt(scores.shows, capacity, np.float32)
            self.clicks = _adopt(scores.clicks, capacity, np.float32)
            self.score_pass = _adopt(scores.score_pass, capacity, np.int32)
        elif self.scores:  # an older checkpoint: every row shown once, now
            self.shows = np.ones(capacity, dtype=np.float32)
            self.clicks = np.zeros(capacity, dtype=np.float32)
            self.score_pass = np.full(capacity, at_pass, dtype=np.int32)
        if self.sketch is not None and book is not None:
            self.sketch.restore(book.sketch, book.sketch_aging)

    # -- figures ----------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Memory held: allocated row arrays (a bounded table's are reserved, and count only
        as far as rows were written), index and sketch."""
        if self.max_capacity:
            return self.footprint(self.size)
        arrays = self._row_arrays() + ([] if self.uses_step else [self.steps])
        sketch = self.sketch.nbytes if self.sketch is not None else 0
        return int(sum(a.nbytes for a in arrays) + self.index.nbytes + sketch)

    def counters(self) -> SparseCounters:
        return SparseCounters(self.admitted, self.evicted, self.dropped)


_EMPTY = np.zeros(0, dtype=np.int64)


def _adopt(source: np.ndarray, capacity: int, dtype: type) -> np.ndarray:
    """``source`` itself when it can be a table's storage of ``capacity`` rows, else a copy
    into a new array of that capacity (pages past the rows are committed only when written)."""
    rows = source.shape[0]
    if (source.dtype == np.dtype(dtype) and rows >= capacity and source.flags.c_contiguous
            and source.flags.writeable):
        return source
    out = np.empty((capacity, *source.shape[1:]), dtype=dtype)
    out[:rows] = source
    return out


def _summed_counts(ids: np.ndarray, unique: np.ndarray,
                   counts: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """Shows and clicks per sorted unique id, summed over duplicates of ``ids``; without
    counts each id is shown once (a client that sends none, e.g. geo mode's deltas)."""
    if counts is None:
        return np.ones(unique.shape[0], np.float32), np.zeros(unique.shape[0], np.float32)
    where = np.searchsorted(unique, ids)
    shows = np.bincount(where, weights=counts[0], minlength=unique.shape[0])
    clicks = np.bincount(where, weights=counts[1], minlength=unique.shape[0])
    return shows.astype(np.float32), clicks.astype(np.float32)


COUNTED = ("admitted", "evicted", "dropped")  # per-table counters a checkpoint keeps


def table_counters(tables: list[SparseTable]) -> dict[str, int]:
    """The checkpoint's counters of sparse tables: ``sparse.<table>.<admitted|evicted|dropped>``
    (so a restored shard goes on counting, and ``checkpoint inspect`` shows them)."""
    return {f"sparse.{t.name}.{what}": int(getattr(t, what)) for t in tables for what in COUNTED}


def batch_seed(pass_id: int, task_id: int, seq: int) -> int:
    """The admission draw's seed for one batch: a retried batch draws the same."""
    key = np.array([pass_id, task_id, seq], dtype=np.uint64)
    mixed = splitmix64(splitmix64(splitmix64(key[:1]) ^ key[1:2]) ^ key[2:3])
    return int(mixed[0] >> np.uint64(1))


Table = DenseShard | SparseTable


def make_table(spec: pserver_pb2.TableSpec, shard: int, num_shards: int,
               memory_cap: int = 0) -> Table:
    """A table for a normalized spec."""
    if spec.kind == TableSpec.DENSE:
        return DenseShard(spec, shard, num_shards)
    return SparseTable(spec, shard, num_shards, memory_cap)
