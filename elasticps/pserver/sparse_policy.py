"""Admission and eviction of sparse rows: pure decisions over arrays; the table carries them out.

- **Admission** decides which pushed ids without a row get one. ``admit_after = k``: an id's
  k-th push creates its row; pushes are counted in a count-min sketch (fixed memory, whatever the
  number of distinct ids), halved every ``width / 2`` counted pushes, so "k pushes" means k
  pushes within a recent window and the long tail of ids seen once never saturates it.
  ``admit_probability = p``: each push of an id without a row creates it with probability p,
  drawn by hashing (id, batch), so a retried batch draws the same. Until its row exists an id
  reads its initial value and its gradients are dropped (counted).
- **Eviction** picks rows to remove: those not pushed for ``ttl_passes`` passes or
  ``ttl_seconds`` seconds, and, when ``max_rows`` or the shard's memory cap needs room, the
  least recently (LRU) or least often (LFU) pushed rows, never one the current push touches.
- **Score** (``evict = SCORE``, CTR tables, as Paddle's ``CtrCommonAccessor``): each row keeps
  a show and a click count, added by every push (the trainer counts the examples showing each
  id and the positive ones among them) and multiplied by ``score_decay`` at each pass end. When
  a pass begins, rows whose score ``(show - click) * nonclk_coeff + click * click_coeff`` fell
  below ``delete_threshold`` are evicted; for room, the lowest score goes first. Decay is kept
  lazily: a row stores its counts as of the pass of its last push (``score_pass``), and its
  counts now are those times ``score_decay ** (current pass - score_pass)``, so a pass end
  changes no row (an incremental checkpoint stays proportional to the rows pushed).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.hashing import splitmix64
from elasticps.proto import pserver_pb2

Policy = pserver_pb2.SparsePolicy
MAX_ADMIT_AFTER = 1000  # the sketch's counters are uint16; a larger k is a typo, not a policy
MAX_ROWS_DECLARED = 1 << 40
SKETCH_DEPTH = 4
SKETCH_WIDTH = 1 << 20  # 4 x 2^20 uint16 counters = 8 MiB per table that admits after k pushes
# Paddle's CtrCommonAccessor defaults (fleet's DistributedStrategy table configs:
# sparse_show_click_decay_rate, sparse_delete_threshold, sparse_nonclk_coeff, sparse_click_coeff).
ScoreField = Literal["score_decay", "delete_threshold", "nonclk_coeff", "click_coeff"]
SCORE_DEFAULTS: dict[ScoreField, float] = {
    "score_decay": 0.98, "delete_threshold": 0.8, "nonclk_coeff": 0.1, "click_coeff": 1.0}


def check_policy(policy: pserver_pb2.SparsePolicy, table: str) -> None:
    """Raise InvalidArgumentError naming the first bad field of a table's policy."""
    if not 0 <= policy.admit_after <= MAX_ADMIT_AFTER:
        raise InvalidArgumentError(f"table {table!r}: admit_after={policy.admit_after} must be "
                                   f"in [0, {MAX_ADMIT_AFTER}]")
    p = policy.admit_probability
    if not (math.isfinite(p) and 0 <= p <= 1):
        raise InvalidArgumentError(f"table {table!r}: admit_probability={p} must be in [0, 1]")
    if p and policy.admit_after > 1:
        raise InvalidArgumentError(f"table {table!r}: admit after k pushes or with a "
                                   "probability, not both")
    if policy.ttl_passes < 0:
        raise InvalidArgumentError(f"table {table!r}: ttl_passes={policy.ttl_passes} must be "
                                   ">= 0 (0 = off)")
    if not (math.isfinite(policy.ttl_seconds) and policy.ttl_seconds >= 0):
        raise InvalidArgumentError(f"table {table!r}: ttl_seconds={policy.ttl_seconds} must be "
                                   "finite and >= 0 (0 = off)")
    if not 0 <= policy.max_rows <= MAX_ROWS_DECLARED:
        raise InvalidArgumentError(f"table {table!r}: max_rows={policy.max_rows} must be in "
                                   f"[0, 2^40] (0 = no limit)")
    if policy.evict not in Policy.Evict.values():
        raise InvalidArgumentError(f"table {table!r}: unknown evict mode {policy.evict}")
    if policy.max_rows and policy.evict == Policy.EVICT_UNSPECIFIED:
        raise InvalidArgumentError(f"table {table!r}: max_rows={policy.max_rows} needs an "
                                   "evict mode (LRU, LFU or SCORE) to choose the rows that leave")
    _check_score(policy, table)


def _check_score(policy: pserver_pb2.SparsePolicy, table: str) -> None:
    """The SCORE settings: only with evict = SCORE, each finite and in its range."""
    for field in SCORE_DEFAULTS:
        if not policy.HasField(field):
            continue
        value = getattr(policy, field)
        if policy.evict != Policy.SCORE:
            raise InvalidArgumentError(f"table {table!r}: {field}={value} is a setting of "
                                       "evict=SCORE, and the table evicts otherwise")
        low_ok = value > 0 if field == "score_decay" else value >= 0
        if not (math.isfinite(value) and low_ok and (field != "score_decay" or value <= 1)):
            limit = "in (0, 1]" if field == "score_decay" else "finite and >= 0"
            raise InvalidArgumentError(f"table {table!r}: {field}={value} must be {limit}")


def fill_score_defaults(policy: pserver_pb2.SparsePolicy) -> None:
    """Set Paddle's default for each SCORE setting left unset (a SCORE policy only), so a
    declaration with and one without the defaults spelled out declare alike."""
    if policy.evict != Policy.SCORE:
        return
    for field, value in SCORE_DEFAULTS.items():
        if not policy.HasField(field):
            setattr(policy, field, value)


def tracks_rows(policy: pserver_pb2.SparsePolicy) -> bool:
    """Whether rows need their last pass, last time and push count (any eviction)."""
    return bool(policy.evict or policy.ttl_passes or policy.ttl_seconds)


class CountMinSketch:
    """Approximate push counts of ids in fixed memory, with conservative update (a counter
    grows only as far as the id's new estimate, which keeps over-counting low) and aging (every
    counter halves once ``width / 2`` increments have gone in since the last halving)."""

    def __init__(self, width: int = SKETCH_WIDTH, depth: int = SKETCH_DEPTH) -> None:
        self.bits = max(4, int(width - 1).bit_length())
        self.counters = np.zeros((depth, 1 << self.bits), dtype=np.uint16)
        self.salts = splitmix64(np.arange(1, depth + 1, dtype=np.uint64))
        self._since_aging = 0

    def _cells(self, keys: np.ndarray) -> np.ndarray:
        hashed = splitmix64(keys.astype(np.uint64)[None, :] ^ self.salts[:, None])
        return (hashed >> np.uint64(64 - self.bits)).astype(np.int64)

    def estimate(self, keys: np.ndarray) -> np.ndarray:
        """Upper bounds on the pushes counted for each key (int64 [n])."""
        cells = self._cells(keys)
        rows = np.arange(self.counters.shape[0])[:, None]
        return self.counters[rows, cells].min(axis=0).astype(np.int64)

    def add(self, keys: np.ndarray) -> None:
        """Count one push of each key (unique keys)."""
        if keys.size == 0:
            return
        cells = self._cells(keys)
        rows = np.arange(self.counters.shape[0])[:, None]
        current = self.counters[rows, cells]
        wanted = np.minimum(current.min(axis=0).astype(np.int64) + 1, np.iinfo(np.uint16).max)
        for depth in range(self.counters.shape[0]):
            np.maximum.at(self.counters[depth], cells[depth], wanted.astype(np.uint16))
        self._since_aging += keys.size
        if self._since_aging * 2 >= self.counters.shape[1]:
            self.counters >>= 1
            self._since_aging = 0

    @property
    def nbytes(self) -> int:
        return int(self.counters.nbytes)

    @property
    def since_aging(self) -> int:
        return self._since_aging

    def restore(self, counters: np.ndarray | None, since_aging: int) -> None:
        """Take a checkpoint's counts; ones of another shape (another sketch size) are
        ignored: the sketch starts empty, as before checkpoints kept it."""
        if counters is None or counters.shape != self.counters.shape:
            return
        self.counters[:] = counters
        self._since_aging = int(since_aging)


def admission(
    policy: pserver_pb2.SparsePolicy, count: int, estimates: np.ndarray | None,
    draws: np.ndarray | None,
) -> np.ndarray:
    """Which of a push's ``count`` ids without a row get one now (bool). ``estimates``: the sketch's
    counts before this push (admit_after); ``draws``: uniform [0, 1) per id (probability)."""
    if policy.admit_after > 1 and estimates is not None:
        return estimates + 1 >= policy.admit_after
    if policy.admit_probability and draws is not None:
        return draws < policy.admit_probability
    return np.ones(count, dtype=bool)


def expired(
    policy: pserver_pb2.SparsePolicy, touched_pass: np.ndarray, touched_at: np.ndarray,
    current_pass: int, now: float,
) -> np.ndarray:
    """Row numbers past their TTL: last pushed before ``ttl_passes`` whole passes went by (a
    row pushed in pass p lives through pass p + ttl_passes) or ``ttl_seconds`` ago."""
    old = np.zeros(touched_pass.shape[0], dtype=bool)
    if policy.ttl_passes:
        old |= touched_pass.astype(np.int64) + policy.ttl_passes < current_pass
    if policy.ttl_seconds:
        old |= touched_at < now - policy.ttl_seconds
    return np.flatnonzero(old)


def decayed(policy: pserver_pb2.SparsePolicy, counts: np.ndarray, since_pass: np.ndarray,
            current_pass: int | np.ndarray) -> np.ndarray:
    """Counts stored as of ``since_pass`` (per row), decayed to ``current_pass``: one
    ``score_decay`` factor per pass end between them (float32, as stored)."""
    ended = np.maximum(current_pass - since_pass.astype(np.int64), 0)
    return (counts * np.power(np.float32(policy.score_decay), ended.astype(np.float32))
            ).astype(np.float32)


def show_click_score(policy: pserver_pb2.SparsePolicy, shows: np.ndarray,
                     clicks: np.ndarray) -> np.ndarray:
    """Paddle's ShowClickScore: a show without a click weighs ``nonclk_coeff``, a click
    ``click_coeff``."""
    return ((shows - clicks) * np.float32(policy.nonclk_coeff)
            + clicks * np.float32(policy.click_coeff)).astype(np.float32)


def below_threshold(policy: pserver_pb2.SparsePolicy, scores: np.ndarray,
                    protected: np.ndarray) -> np.ndarray:
    """Row numbers whose score is below ``delete_threshold`` (the pass-end eviction), none
    in ``protected`` (the rows the push that began the pass trains)."""
    low = scores < np.float32(policy.delete_threshold)
    low[protected] = False
    return np.flatnonzero(low)


def victims(
    policy: pserver_pb2.SparsePolicy, hits: np.ndarray, touched_at: np.ndarray, count: int,
    protected: np.ndarray, ids: np.ndarray | None = None, scores: np.ndarray | None = None,
) -> np.ndarray:
    """Row numbers of the ``count`` rows to evict (sorted): least recently pushed (LRU), least
    often (LFU, the least recent first among equals) or lowest ``scores`` (SCORE, the
    show/click score now); never a row in ``protected``. Rows equal
    in that order go by smaller id (with ``ids``), not by where they sit, so a shard restored
    from a checkpoint (rows in another order) evicts the same rows as the one it was saved
    from."""
    n = hits.shape[0]
    count = min(count, n - protected.shape[0])
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if policy.evict == Policy.SCORE and scores is not None:
        score = scores.astype(np.float64)
    elif policy.evict == Policy.LFU:
        # Ties in the count go to the older row: the time breaks them as a fraction below 1.
        span = float(touched_at.max() - touched_at.min()) + 1.0 if n else 1.0
        score = hits.astype(np.float64) + (touched_at - touched_at.min()) / (2 * span)
    else:
        score = touched_at.astype(np.float64)
    score[protected] = np.inf
    if count >= n:
        return np.arange(n, dtype=np.int64)
    order = np.argpartition(score, count - 1)
    chosen = order[:count]
    if ids is not None:
        # Of the rows equal to the count-th score, the smallest ids go (O(n), and no more
        # memory than the partition: a full table chooses victims under the memory cap).
        kth = score[order[count - 1]]
        at_kth = score[chosen] == kth
        tied = np.flatnonzero(score == kth)
        if tied.size > np.count_nonzero(at_kth):
            pick = tied[np.argsort(ids[tied], kind="stable")[:np.count_nonzero(at_kth)]]
            chosen = np.concatenate([chosen[~at_kth], pick])
    return np.sort(chosen).astype(np.int64)
