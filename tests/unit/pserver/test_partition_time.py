"""A stream's sparse tables expire and decay rows on partition time (``BatchRef.event_time``),
not on the shard's clock nor its one pass: a shard pushed a week of partitions behaves as a
shard that lived through that week, whatever its clock says, and keeps doing so through a
checkpoint and a resharding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver import sparse_policy
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.policy_clock import EVENT_TIME_COUNTER
from elasticps.pserver.reshard.split import reshard_snapshots
from elasticps.pserver.shard import BatchKey, ShardState
from tests.unit.pserver.test_score_eviction import EagerModel, _random_push

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy
DAY = 86_400.0
LAST_WEEK = 1_795_824_000.0  # 2026-11-28 00:00 UTC: a backfill's first day


def shard(policy: pserver_pb2.SparsePolicy, clock: float = 0.0, n: int = 1,
          slot: int = 0) -> ShardState:
    """A shard whose own clock stands still: only partition time can move its policies."""
    state = ShardState(slot, n, clock=lambda: clock)
    state.wall_clock = lambda: 2_000_000_000.0  # 'now' is years after the partitions
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=2,
                        optimizer=OPT(kind=OPT.SGD, lr=0.1), policy=policy)])
    state.init_dense({})
    return state


def push(state: ShardState, seq: int, event_time: float, ids: np.ndarray,
         shows: np.ndarray | None = None, clicks: np.ndarray | None = None) -> None:
    counts = None if shows is None or clicks is None else {"emb": (shows, clicks)}
    state.push(BatchKey(0, 0, seq, seq, event_time), {},
               {"emb": (ids, np.full((ids.size, 2), 0.5, np.float32))}, counts=counts)


def held(state: ShardState) -> list[int]:
    table = state.tables["emb"]
    return sorted(table.ids[:table.size].tolist())


def score_policy() -> pserver_pb2.SparsePolicy:
    policy = POLICY(evict=POLICY.SCORE, score_decay=0.7, delete_threshold=0.5)
    sparse_policy.fill_score_defaults(policy)
    return policy


def test_show_click_scores_decay_once_per_day_of_partition_time_in_one_pass() -> None:
    """Hourly partitions of a backfill, all pass 0: the shard evicts exactly as Paddle's eager
    model does with one pass end per day of data."""
    state, model = shard(score_policy()), EagerModel(score_policy())
    rng = np.random.default_rng(7)
    for seq in range(5 * 24 // 3):  # five days of three-hourly partitions
        event_time = LAST_WEEK + 3 * 3600 * seq
        ids, shows, clicks = _random_push(rng)
        push(state, seq, event_time, ids, shows, clicks)
        model.push(int((event_time - LAST_WEEK) // DAY), ids, shows, clicks)
        assert held(state) == sorted(model.rows), f"partition {seq}"
    assert state.tables["emb"].evicted > 50  # days ended and evicted: the check could fail
    assert state.current_pass == int((LAST_WEEK + 4 * DAY) // DAY)  # the policy's pass: days
    assert state.applied.contains(0, 0, 0)  # exactly-once still counts pass 0


def test_ttl_seconds_counts_partition_time_and_a_late_batch_moves_no_clock() -> None:
    state = shard(POLICY(ttl_seconds=2 * 3600))
    push(state, 0, LAST_WEEK, np.array([1, 2], np.int64))
    push(state, 1, LAST_WEEK + 3600, np.array([2], np.int64))
    assert held(state) == [1, 2]
    push(state, 2, LAST_WEEK + 2.5 * 3600, np.array([3], np.int64))  # id 1 is 2.5 h old
    assert held(state) == [2, 3]
    push(state, 3, LAST_WEEK, np.array([4], np.int64))  # a late batch of the first hour
    assert held(state) == [2, 3, 4]  # it is stamped with the newest time, expires nothing
    assert state.policy_clock.event_time == LAST_WEEK + 2.5 * 3600


def test_ttl_passes_counts_days_of_data_in_a_stream() -> None:
    state = shard(POLICY(ttl_passes=1))
    push(state, 0, LAST_WEEK, np.array([1], np.int64))
    push(state, 1, LAST_WEEK + DAY + 3600, np.array([2], np.int64))
    assert held(state) == [1, 2]  # pushed yesterday: lives through today
    push(state, 2, LAST_WEEK + 2 * DAY + 3600, np.array([3], np.int64))
    assert held(state) == [2, 3]


def test_a_restored_shard_goes_on_from_the_partition_time_it_saved(tmp_path: Path) -> None:
    policy = score_policy()
    policy.ttl_seconds = 30 * 3600
    saved = shard(policy, clock=10.0)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1)
    rng = np.random.default_rng(11)
    for seq in range(16):
        push(saved, seq, LAST_WEEK + 4 * 3600 * seq, *_random_push(rng))
    checkpoints.save(saved.snapshot()[0])
    loaded = checkpoints.load_newest()
    assert loaded is not None
    assert loaded[0].counters[EVENT_TIME_COUNTER] == (LAST_WEEK + 4 * 3600 * 15) * 1000
    restored = shard(policy, clock=99_999.0)  # another process, another clock
    restored.restore(loaded[0], loaded[1].id)
    assert restored.current_pass == saved.current_pass
    before = saved.tables["emb"].evicted
    for seq in range(16, 40):
        batch = _random_push(rng)
        push(saved, seq, LAST_WEEK + 4 * 3600 * seq, *batch)
        push(restored, seq, LAST_WEEK + 4 * 3600 * seq, *batch)
        assert held(restored) == held(saved), f"partition {seq}"
    assert saved.tables["emb"].evicted > before  # expiry and decay went on after the restore


def test_a_resharded_job_keeps_its_partition_time_on_every_new_shard() -> None:
    old = [shard(POLICY(ttl_passes=1), n=2, slot=slot) for slot in range(2)]
    for slot, state in enumerate(old):
        push(state, 0, LAST_WEEK + slot * 3600, np.array([slot], np.int64))
    new = reshard_snapshots([s.snapshot()[0] for s in old], 3)
    assert [s.counters[EVENT_TIME_COUNTER] for s in new] == [(LAST_WEEK + 3600) * 1000] * 3


@pytest.mark.parametrize("event_time", [-1.0, float("nan"), float("inf")])
def test_a_bad_event_time_is_refused_and_changes_nothing(event_time: float) -> None:
    state = shard(POLICY(ttl_seconds=60))
    push(state, 0, LAST_WEEK, np.array([1], np.int64))
    with pytest.raises(InvalidArgumentError, match="event_time="):
        push(state, 1, event_time, np.array([2], np.int64))
    assert held(state) == [1]
    assert state.policy_clock.event_time == LAST_WEEK
