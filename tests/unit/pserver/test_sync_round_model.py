"""Model-based tests of sync mode's step barrier.

``SyncRounds`` alone: trainers take tasks, push their batches, die (their lease expires, so the
pserver drops them), come back under the same name, end tasks; a task whose holder died goes to
another trainer, which pushes the batch its holder left waiting in the round. After every step
no batch is applied twice, and the barrier never deadlocks: whenever every member of the round
waits on a contribution of it, the round has closed. Before a batch's new holder counted as
having contributed (the contribution was keyed by the trainer that first pushed it), this found
the deadlock at once: b pushes and dies, c takes b's task and pushes the same batch, a pushes;
every member waits and the round never closes.

Then real sync shards (``SyncShards``): every push goes to every shard and pservers restore,
so a recovering trainer's batch is a duplicate on some shards. Before such a trainer left the
round of a shard that holds its batch, two trainers recovering batches missing on different
shards each waited in one shard's round for the other
(``test_two_recoveries_missing_on_different_shards_do_not_wait_for_each_other``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from elasticps.proto import pserver_pb2
from elasticps.pserver.routing import dense_bounds
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.pserver.sync_round import Contribution, SyncRounds
from elasticps.pserver.sync_wait import CrossShardWait

TRAINERS = ("a", "b", "c")
TASKS = 2
BATCHES_PER_TASK = 4


class SyncBarrier(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rounds = SyncRounds()
        self.alive = set(TRAINERS)
        self.holder: dict[int, str | None] = dict.fromkeys(range(TASKS))
        self.next_seq = dict.fromkeys(range(TASKS), 0)  # the task's first unapplied batch
        self.holding: dict[str, int] = {}  # trainer -> task it trains
        self.waiting: dict[str, Contribution] = {}  # trainer -> the contribution it waits on
        self.applied: Counter[tuple[int, int, int]] = Counter()

    # -- what trainers and the pserver do (each rule draws among the moves possible now) ---

    def _idle(self) -> list[str]:
        return sorted(self.alive - self.holding.keys())

    def _free_tasks(self) -> list[int]:
        return [t for t, h in self.holder.items() if h is None
                and self.next_seq[t] < BATCHES_PER_TASK]

    def _training(self) -> list[str]:
        return sorted(self.holding.keys() - self.waiting.keys())

    @precondition(lambda self: self._idle() and self._free_tasks())
    @rule(data=st.data())
    def take_task(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(self._idle()))
        task = data.draw(st.sampled_from(self._free_tasks()))
        self.holder[task], self.holding[trainer] = trainer, task
        self.rounds.join(trainer)  # JoinRound when a task begins

    @precondition(lambda self: self._training())
    @rule(data=st.data())
    def push(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(self._training()))
        task = self.holding[trainer]
        batch = (0, task, self.next_seq[task])
        self.waiting[trainer] = self.rounds.offer(Contribution(trainer, batch, {}, {}, False))
        self._close_if_ready()

    @precondition(lambda self: self.alive)
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(sorted(self.alive)))
        self.alive.discard(trainer)
        task = self.holding.pop(trainer, None)
        if task is not None:
            self.holder[task] = None  # the master hands the task out again
        self.waiting.pop(trainer, None)  # its push stays in the round; nobody waits on it
        self.rounds.leave(trainer)  # its trainer/ key vanished: sync_members drops it
        self._close_if_ready()

    @precondition(lambda self: len(self.alive) < len(TRAINERS))
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        # a restarted trainer under the same name, idle
        self.alive.add(data.draw(st.sampled_from(sorted(set(TRAINERS) - self.alive))))

    @precondition(lambda self: self._training())
    @rule(data=st.data())
    def end_task(self, data: st.DataObject) -> None:
        self._end(data.draw(st.sampled_from(self._training())))

    def _end(self, trainer: str) -> None:
        self.holder[self.holding.pop(trainer)] = None
        self.rounds.leave(trainer)  # LeaveRound when a task ends
        self._close_if_ready()

    def _close_if_ready(self) -> None:
        if not self.rounds.ready():
            return
        for contribution in self.rounds.take():
            self.applied[contribution.batch] += 1
            contribution.done = True
            _, task, seq = contribution.batch
            self.next_seq[task] = max(self.next_seq[task], seq + 1)
        for trainer in [t for t, c in self.waiting.items() if c.done]:
            del self.waiting[trainer]
            task = self.holding[trainer]
            if self.next_seq[task] >= BATCHES_PER_TASK:
                self._end(trainer)

    # -- what must hold --------------------------------------------------------------------

    @invariant()
    def no_batch_applied_twice(self) -> None:
        twice = [batch for batch, n in self.applied.items() if n > 1]
        assert not twice, f"applied more than once: {twice}"

    @invariant()
    def the_round_never_waits_on_a_member_that_waits(self) -> None:
        members = set(self.rounds.members)
        if members and members <= self.waiting.keys():
            raise AssertionError(
                f"deadlock: every member {sorted(members)} waits in the round, which is open "
                f"with {len(self.rounds.pending)} contribution(s)")


TestSyncBarrier = SyncBarrier.TestCase
TestSyncBarrier = pytest.mark.slow(TestSyncBarrier)
TestSyncBarrier.settings = settings(max_examples=200, stateful_step_count=30, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])


# -- the same over real sync shards: every push goes to every shard, shards restore ----------

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SHARDS = 2
SHARD_TASKS = 3  # three trainers can hold a task at once: the fewest a cross-shard cycle needs
W_SIZE = 4  # 2 dense elements per shard


def _fresh_shard(i: int) -> ShardState:
    shard = ShardState(i, SHARDS, mode="sync")
    shard.declare([SPEC(name="w", kind=SPEC.DENSE, shape=[W_SIZE],
                        optimizer=OPT(kind=OPT.SGD, lr=1.0))])
    start, stop = dense_bounds(W_SIZE, i, SHARDS)
    shard.init_dense({"w": np.zeros(stop - start, np.float32)})
    return shard


class SyncShards(RuleBasedStateMachine):
    """Trainers push each batch to every shard and move on once every shard has answered. A
    shard answers ``pending`` at once (``wait_s=0``) while its round is open, and the trainer
    sends again, as PServerClient does; on a ``pending`` it leaves the rounds of the shards
    that already answered that push (:class:`CrossShardWait`, as PServerClient does). A
    pserver crashes (its open round and members are lost; pushes to it wait until it is back)
    and restarts from its checkpoint (it may lack batches other shards hold, so the task's next
    holder recomputes batches some shards answer as duplicates). Resends are rules of their
    own, so pushes reach a restarted shard in any order. Whenever every shard is up and every
    trainer holding a task waits, resending until nothing changes must free one, or the job is
    deadlocked."""

    def __init__(self) -> None:
        super().__init__()
        self.shards = [_fresh_shard(i) for i in range(SHARDS)]
        self.checkpoints = [s.snapshot()[0] for s in self.shards]
        self.down: set[int] = set()
        self.alive = set(TRAINERS)
        self.holder: dict[int, str | None] = dict.fromkeys(range(SHARD_TASKS))
        self.holding: dict[str, int] = {}
        self.seq: dict[str, int] = {}  # the batch the trainer trains now
        self.unanswered: dict[str, set[int]] = {}  # trainer -> shards yet to answer its push
        self.waits: dict[str, CrossShardWait] = {}  # trainer -> its push's answers

    def _first_missing(self, task: int) -> int:
        seq = 0
        while seq < BATCHES_PER_TASK and all(s.applied.contains(0, task, seq)
                                             for s in self.shards):
            seq += 1
        return seq

    def _idle(self) -> list[str]:
        return sorted(self.alive - self.holding.keys())

    def _free_tasks(self) -> list[int]:
        return [t for t, h in self.holder.items()
                if h is None and self._first_missing(t) < BATCHES_PER_TASK]

    def _ready_to_push(self) -> list[str]:
        return sorted(t for t in self.holding if t not in self.unanswered)

    def _can_resend(self) -> list[str]:
        return sorted(t for t, left in self.unanswered.items() if left - self.down)

    # JoinRound goes to every shard and waits for one that is down: no task begins meanwhile.
    @precondition(lambda self: not self.down and self._idle() and self._free_tasks())
    @rule(data=st.data())
    def take_task(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(self._idle()))
        task = data.draw(st.sampled_from(self._free_tasks()))
        self.holder[task], self.holding[trainer] = trainer, task
        self.seq[trainer] = self._first_missing(task)  # resumes where some shard lacks it
        for shard in self.shards:
            shard.join_round(trainer)

    @precondition(lambda self: self._ready_to_push())
    @rule(data=st.data())
    def push(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(self._ready_to_push()))
        self.unanswered[trainer] = set(range(SHARDS))
        self.waits[trainer] = CrossShardWait()
        self._send(trainer)

    @precondition(lambda self: self._can_resend())
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        self._send(data.draw(st.sampled_from(self._can_resend())))

    @precondition(lambda self: self.alive)
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        trainer = data.draw(st.sampled_from(sorted(self.alive)))
        self.alive.discard(trainer)
        self._release(trainer)

    @precondition(lambda self: len(self.alive) < len(TRAINERS))
    @rule(data=st.data())
    def come_back(self, data: st.DataObject) -> None:
        self.alive.add(data.draw(st.sampled_from(sorted(set(TRAINERS) - self.alive))))

    @rule(i=st.integers(0, SHARDS - 1))
    def checkpoint(self, i: int) -> None:
        if i not in self.down:
            self.checkpoints[i] = self.shards[i].snapshot()[0]

    @rule(i=st.integers(0, SHARDS - 1))
    def crash(self, i: int) -> None:
        """Pserver i is SIGKILLed: its open round and its members are gone."""
        self.down.add(i)

    @precondition(lambda self: self.down)
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """A new process restores the crashed pserver's checkpoint, with no round members:
        trainers' pushes make them members again, in the order they arrive."""
        i = data.draw(st.sampled_from(sorted(self.down)))
        shard = ShardState(i, SHARDS, mode="sync")
        shard.restore(self.checkpoints[i], "checkpoint")
        self.shards[i] = shard
        self.checkpoints[i] = shard.snapshot()[0]
        self.down.discard(i)

    def _release(self, trainer: str) -> None:
        task = self.holding.pop(trainer, None)
        if task is not None:
            self.holder[task] = None
        self.unanswered.pop(trainer, None)
        for i, shard in enumerate(self.shards):
            if i not in self.down:
                shard.leave_round(trainer)  # its lease expired, or it ended its task

    def _send(self, trainer: str) -> bool:
        """(Re)send the trainer's batch to the shards that are up and have not answered; True
        if one answered."""
        task, seq, wait = self.holding[trainer], self.seq[trainer], self.waits[trainer]
        moved = False
        for i in sorted(self.unanswered[trainer] - self.down):
            part = np.full(W_SIZE // SHARDS, -1.0, np.float32)
            result = self.shards[i].push(BatchKey(0, task, seq), {"w": part}, {},
                                         trainer=trainer, wait_s=0.0)
            if result.pending:
                for j in wait.to_leave():
                    if j not in self.down:
                        self.shards[j].leave_round(trainer)
            else:
                wait.answered(i)
                self.unanswered[trainer].discard(i)
                moved = True
        if not self.unanswered[trainer]:
            del self.unanswered[trainer]
            self.seq[trainer] = seq + 1
            if self.seq[trainer] >= BATCHES_PER_TASK:
                self._release(trainer)
        return moved

    def settle(self) -> None:
        """Every waiting trainer resends until nothing changes."""
        for _ in range(50):
            if not any([self._send(t) for t in list(self.unanswered) if t in self.unanswered]):
                return
        raise AssertionError("resends kept changing the state")

    def finish(self) -> None:
        """Every trainer pushes until its task is done (every shard up)."""
        for _ in range(SHARD_TASKS * BATCHES_PER_TASK * 4):
            if not self.holding:
                return
            for trainer in self._ready_to_push():
                self.push(_Draws(trainer))
            self.some_trainer_can_act()
        raise AssertionError(f"tasks still held after every push: {self.holding}")

    @invariant()
    def some_trainer_can_act(self) -> None:
        if self.down or not self.holding or not all(t in self.unanswered for t in self.holding):
            return
        self.settle()
        if self.holding and all(t in self.unanswered for t in self.holding):
            raise AssertionError(
                "deadlock: every trainer holding a task waits on a shard's round: "
                + "; ".join(f"{t} (task {self.holding[t]}, seq {self.seq[t]}) on shard(s) "
                            f"{sorted(self.unanswered[t])}" for t in sorted(self.holding)))

    @invariant()
    def no_shard_applies_a_batch_twice(self) -> None:
        for i, shard in enumerate(self.shards):
            if i in self.down:
                continue
            for _, task, below, extra in shard.applied.tasks():
                held = below + len(extra)
                assert shard.applied.applications(0, task) <= held, (
                    f"shard {shard.shard} applied a batch of task {task} twice")


TestSyncShards = SyncShards.TestCase
TestSyncShards = pytest.mark.slow(TestSyncShards)
TestSyncShards.settings = settings(max_examples=300, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


class _Draws:
    """Stands in for hypothesis' ``data`` to replay one schedule by hand."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, strategy: object) -> object:
        return self.values.pop(0)


def test_two_recoveries_missing_on_different_shards_do_not_wait_for_each_other() -> None:
    """Shard 0 lacks task 0's batch 0 and shard 1 task 1's; one trainer recovers each. Each
    push is a duplicate on the other shard: were its trainer still waited for there, each
    would wait in one shard's round for the other, for ever."""
    m = SyncShards()
    d = _Draws
    m.take_task(d("a", 0))
    m.push(d("a"))  # (0, 0) on both shards
    m.checkpoint(1)  # shard 1 holds (0, 0)
    m.crash(0)
    m.restart(d(0))  # shard 0 is back to its empty first checkpoint
    m.die(d("a"))
    m.take_task(d("b", 1))
    m.push(d("b"))  # (1, 0) on both shards
    m.die(d("b"))
    m.crash(1)
    m.restart(d(1))  # shard 1 is back to holding (0, 0) only
    assert [[s.applied.contains(0, t, 0) for t in (0, 1)] for s in m.shards] == [
        [False, True], [True, False]]
    m.come_back(d("a"))
    m.take_task(d("c", 0))
    m.take_task(d("a", 1))
    m.push(d("c"))
    m.push(d("a"))
    m.some_trainer_can_act()
    assert all(s.applied.contains(0, t, 0) for s in m.shards for t in (0, 1))


def test_a_restarted_shard_that_closes_rounds_in_another_order_does_not_deadlock() -> None:
    """Three trainers push while shard 1 is down; shard 0 closes their round. Back with no
    members, shard 1 takes their resends one by one: a's closes alone, a pushes its next batch
    and it closes there with b's, b pushes its next. Then a's batch waits at shard 0 for c's
    next push, and c's waits at shard 1 for a's next: each trainer's batch is applied where
    the other waits. Unless a trainer leaves the rounds of the shards that answered while
    another keeps it waiting, no round ever closes again."""
    m = SyncShards()
    d = _Draws
    for trainer, task in (("a", 0), ("b", 1), ("c", 2)):
        m.take_task(d(trainer, task))
    m.crash(1)
    for trainer in "abc":
        m.push(d(trainer))  # shard 0 closes {a, b, c}; shard 1 is down
    m.restart(d(1))
    m.resend(d("a"))  # shard 1: members {a}, closes {a0}; a is done with batch 0
    m.resend(d("b"))  # shard 1: members {a, b}, waits for a
    m.push(d("a"))  # a1: shard 1 closes {b0, a1}; shard 0 waits for b and c
    m.push(d("b"))  # b1: shard 0 waits for c; shard 1 waits for a
    m.resend(d("c"))  # c0 at shard 1: waits for a, who waits at shard 0 for c
    m.some_trainer_can_act()
    m.finish()
    assert all(s.applied.contains(0, task, seq) for s in m.shards
               for task in range(SHARD_TASKS) for seq in range(BATCHES_PER_TASK))


def test_a_slow_member_keeps_the_barrier_no_trainer_leaves_while_no_shard_answered() -> None:
    """a pushes while b is still computing: both shards answer a ``pending``, again and again.
    No shard answered a's push, so a leaves no round: when b pushes, each round closes with
    both batches, one mean step (the barrier held for the slow member)."""
    m = SyncShards()
    d = _Draws
    m.take_task(d("a", 0))
    m.take_task(d("b", 1))
    m.push(d("a"))
    for _ in range(3):
        m.resend(d("a"))
    assert m.unanswered["a"] == {0, 1}
    assert all(s.round_members() == {"a", "b"} for s in m.shards)
    assert all(s.stats().rounds == 0 for s in m.shards)
    m.push(d("b"))
    m.settle()
    assert "a" not in m.unanswered
    assert "b" not in m.unanswered
    assert all(s.stats().rounds == 1 for s in m.shards)  # one round of both batches


def test_cross_shard_wait_leaves_only_the_shards_that_answered_and_each_once() -> None:
    wait = CrossShardWait()
    assert wait.to_leave() == []  # nothing answered: a slow member is waited for
    wait.answered(2)
    wait.answered(0)
    assert wait.to_leave() == [0, 2]
    assert wait.to_leave() == []  # left once
    wait.answered(1)
    assert wait.to_leave() == [1]
