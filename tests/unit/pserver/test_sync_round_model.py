"""A model-based test of sync mode's step barrier (``SyncRounds``): trainers take tasks, push
their batches, die (their lease expires, so the pserver drops them), come back under the same
name, end tasks; a task whose holder died goes to another trainer, which pushes the batch its
holder left waiting in the round. After every step:

- no batch is applied twice;
- the barrier never deadlocks: whenever every member of the round waits on a contribution of
  it, the round has closed (there is no member left for it to wait for).

Before a batch's new holder counted as having contributed (the contribution was keyed by the
trainer that first pushed it), this found the deadlock at once: b pushes and dies, c takes b's
task and pushes the same batch, a pushes; every member waits and the round never closes.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from elasticps.pserver.sync_round import Contribution, SyncRounds

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
TestSyncBarrier.settings = settings(max_examples=200, stateful_step_count=30, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
