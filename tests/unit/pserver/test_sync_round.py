"""Sync mode's step barrier on one shard, without sockets: rounds close when every member has
pushed, apply the mean once, adapt to leaving members, and keep exactly-once."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import BatchKey, PushResult, ShardState
from elasticps.pserver.sync_round import Contribution, SyncRounds
from elasticps.trainer import optim
from tests.helpers import wait_for

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[4], optimizer=OPT(kind=OPT.SGD, lr=0.5)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=2, id_space=100, optimizer=OPT(kind=OPT.SGD, lr=0.5),
         initializer=pserver_pb2.Initializer(kind=pserver_pb2.Initializer.ZEROS)),
]
W0 = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
NO_ROWS = {"emb": (np.zeros(0, np.int64), np.zeros((0, 2), np.float32))}


def _shard(*members: str) -> ShardState:
    shard = ShardState(0, 1, mode="sync")
    shard.declare(SPECS)
    shard.init_dense({"w": W0})
    for trainer in members:  # they began their tasks
        shard.join_round(trainer)
    return shard


def _grad(value: float) -> dict[str, np.ndarray]:
    return {"w": np.full(4, value, np.float32)}


@pytest.fixture
def pool():
    with ThreadPoolExecutor(4) as executor:
        yield executor


def _push(pool: ThreadPoolExecutor, shard: ShardState, trainer: str, seq: int,
          grad: float, **kw) -> Future[PushResult]:
    return pool.submit(shard.push, BatchKey(0, 0 if trainer == "a" else 1, seq), _grad(grad),
                       NO_ROWS, trainer=trainer, wait_s=30.0, **kw)


def _waiting(shard: ShardState, n: int) -> bool:
    return shard.stats().round_waiting == n


def test_a_round_applies_the_mean_once_when_every_member_pushed(pool) -> None:
    shard = _shard("a", "b")
    first = [_push(pool, shard, "a", 0, 1.0), _push(pool, shard, "b", 0, 3.0)]
    # Round 0: whoever came first waited for the other.
    assert all(f.result(timeout=30).applied for f in first)
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.5 * 2.0)
    # Round 1: a alone is held until b pushes; nothing changes meanwhile.
    a = _push(pool, shard, "a", 1, 2.0)
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait in the round")
    assert not a.done()
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.0)
    b = _push(pool, shard, "b", 1, 4.0)
    assert a.result(timeout=30).applied
    assert b.result(timeout=30).applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.0 - 0.5 * 3.0)
    stats = shard.stats()
    assert (stats.rounds, stats.pushes, stats.applied_batches) == (2, 4, 4)
    # A batch already applied is a duplicate, answered at once (no round joined).
    again = shard.push(BatchKey(0, 0, 1), _grad(9.0), NO_ROWS, trainer="a", wait_s=30.0)
    assert (again.applied, again.pending) == (False, False)
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 2.5)


def test_a_member_that_leaves_is_no_longer_waited_for(pool) -> None:
    shard = _shard("a", "b")
    assert all(f.result(timeout=30).applied
               for f in [_push(pool, shard, "a", 0, 1.0), _push(pool, shard, "b", 0, 1.0)])
    a = _push(pool, shard, "a", 1, 2.0)
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait for b")
    assert shard.leave_round("b")  # b ended its task
    assert a.result(timeout=30).applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.5 - 1.0)  # a's alone
    assert shard.round_members() == {"a"}
    assert not shard.leave_round("b")  # leaving twice is harmless


def test_a_push_not_closed_in_time_is_pending_and_its_resend_adds_nothing(pool) -> None:
    shard = _shard("a", "b")
    assert all(f.result(timeout=30).applied
               for f in [_push(pool, shard, "a", 0, 1.0), _push(pool, shard, "b", 0, 1.0)])
    for _ in range(2):  # the client sends the same push again after each pending answer
        result = shard.push(BatchKey(0, 0, 1), _grad(2.0), NO_ROWS, trainer="a", wait_s=0.01)
        assert (result.applied, result.pending) == (False, True)
    assert shard.stats().round_waiting == 1
    b = _push(pool, shard, "b", 1, 4.0)
    assert b.result(timeout=30).applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.5 - 1.5)  # once, mean 3
    assert shard.applied.applications(0, 0) == 2  # a's seq 0 and 1, each once


def test_a_batch_waiting_in_the_round_is_not_added_twice_by_another_trainer(pool) -> None:
    shard = _shard("a", "b")
    assert all(f.result(timeout=30).applied
               for f in [_push(pool, shard, "a", 0, 1.0), _push(pool, shard, "b", 0, 1.0)])
    a = _push(pool, shard, "a", 1, 2.0)
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait")
    # a's task went to c (a died mid-round): c recomputes batch (0, 0, 1) under the same key.
    c = pool.submit(shard.push, BatchKey(0, 0, 1), _grad(2.0), NO_ROWS, trainer="c",
                    wait_s=30.0)
    assert shard.leave_round("a")
    b = _push(pool, shard, "b", 1, 4.0)
    assert a.result(timeout=30).applied
    assert b.result(timeout=30).applied
    assert not c.result(timeout=30).applied  # a duplicate of a's, which was applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.5 - 1.5)


def test_a_non_finite_push_is_recorded_as_skipped_and_left_out_of_the_mean(pool) -> None:
    shard = _shard("a", "b")
    bad = {"w": np.array([np.nan, 0, 0, 0], np.float32)}
    a = pool.submit(shard.push, BatchKey(0, 0, 0), bad, NO_ROWS, trainer="a", wait_s=30.0)
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait")
    b = _push(pool, shard, "b", 0, 2.0)
    assert a.result(timeout=30) == PushResult(applied=True, skipped=True)
    assert b.result(timeout=30).applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.0)  # b's alone
    assert shard.stats().skipped_nonfinite == 1
    assert len(shard.applied) == 2


def test_sparse_rows_average_over_every_contribution() -> None:
    shard = _shard("a", "b")
    ids = np.array([3, 3, 7], np.int64)
    rows = np.ones((3, 2), np.float32)
    done = threading.Event()

    def a() -> None:
        shard.push(BatchKey(0, 0, 0), _grad(0.0), {"emb": (ids, rows)}, trainer="a",
                   wait_s=30.0)
        done.set()

    thread = threading.Thread(target=a)
    thread.start()
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait")
    shard.push(BatchKey(0, 1, 0), _grad(0.0), {"emb": (ids[:1], rows[:1])}, trainer="b",
               wait_s=30.0)
    thread.join(30)
    assert done.is_set()
    # id 3: (2 + 1) / 2 trainers; id 7: 1 / 2 (b did not touch it: a zero gradient)
    np.testing.assert_allclose(shard.pull_sparse("emb", np.array([3, 7])),
                               [[-0.75, -0.75], [-0.25, -0.25]])


def test_a_sync_push_must_name_its_trainer() -> None:
    shard = _shard()
    with pytest.raises(InvalidArgumentError, match=r"BatchRef\.trainer"):
        shard.push(BatchKey(0, 0, 0), _grad(1.0), NO_ROWS)
    assert shard.stats().applied_batches == 0


def test_a_joined_member_is_waited_for_before_its_first_push(pool) -> None:
    shard = _shard("a")
    shard.join_round("b")  # b began a task and computes its first batch
    a = _push(pool, shard, "a", 0, 1.0)
    wait_for(lambda: _waiting(shard, 1), 10, "a's push to wait for b's")
    assert not a.done()
    b = _push(pool, shard, "b", 0, 3.0)
    assert a.result(timeout=30).applied
    assert b.result(timeout=30).applied
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 1.0)


def test_the_bookkeeping_alone() -> None:
    rounds = SyncRounds()

    def offer(trainer: str, seq: int) -> Contribution:
        return rounds.offer(Contribution(trainer, (0, 0, seq), {}, {}, False))

    first = offer("a", 0)
    assert rounds.ready()  # a alone is every member
    assert offer("a", 0) is first  # a resend waits on the same contribution
    assert offer("b", 0) is first  # the same batch from another trainer too, counted as b's
    assert (rounds.members, rounds.contributed()) == ({"a", "b"}, {"a", "b"})
    assert rounds.ready()
    assert [c.batch for c in rounds.take()] == [(0, 0, 0)]
    offer("a", 2)
    assert not rounds.ready()  # b is a member and has not pushed in this round
    assert rounds.leave("b")
    assert rounds.ready()


def test_a_task_taken_over_mid_round_closes_the_round(pool) -> None:
    """Three members; b dies while its push waits, c takes b's task and pushes b's batch
    again; the slow member a pushes last. The round closes with each batch once."""
    shard = _shard("a", "b")
    b = _push(pool, shard, "b", 0, 3.0)
    wait_for(lambda: _waiting(shard, 1), 10, "b's push to wait for a")
    assert shard.leave_round("b")  # b's lease expired: it died
    shard.join_round("c")  # c took b's task and began it
    # The same batch (task 1, seq 0), now c's: it waits in the round, answered pending.
    assert shard.push(BatchKey(0, 1, 0), _grad(3.0), NO_ROWS, trainer="c", wait_s=0.01).pending
    a = _push(pool, shard, "a", 0, 1.0)  # the slow member, last
    assert a.result(timeout=10).applied
    # c's resend: b's contribution was applied once, so c's is a duplicate.
    again = shard.push(BatchKey(0, 1, 0), _grad(3.0), NO_ROWS, trainer="c", wait_s=0.01)
    assert (again.applied, again.pending) == (False, False)
    assert b.result(timeout=10).applied  # the dead trainer's call, had it lived
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.5 * 2.0)  # mean of 1, 3
    assert (shard.stats().rounds, shard.stats().applied_batches) == (1, 2)
    # Its duplicate left c with nothing for this shard's round: not waited for until it pushes.
    assert shard.round_members() == {"a"}


def test_a_round_steps_at_the_learning_rate_of_its_smallest_batch_number(pool) -> None:
    """Two trainers' batches numbered 12 and 7 close one round: its one step takes the
    schedule's rate at step 7, 0.05 (a function of the round's batches, not of the rounds
    counted: this is the shard's first round; nor of the last batch: 0.005 at step 12)."""
    schedule = optim.StepDecay(step_size=5, gamma=0.1)
    spec = SPEC(name="w", kind=SPEC.DENSE, shape=[4],
                optimizer=optim.SGD(lr=0.5, schedule=schedule).to_proto())
    shard = ShardState(0, 1, mode="sync")
    shard.declare([spec])
    shard.init_dense({"w": W0})
    for trainer in ("a", "b"):
        shard.join_round(trainer)
    pushes = [pool.submit(shard.push, BatchKey(0, task, 0, step), _grad(2.0), {},
                          trainer=trainer, wait_s=30.0)
              for trainer, task, step in (("a", 4, 12), ("b", 1, 7))]
    assert all(f.result(timeout=30).applied for f in pushes)
    np.testing.assert_allclose(shard.pull_dense(["w"])["w"], W0 - 0.05 * 2.0, rtol=1e-6)
