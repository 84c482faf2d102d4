"""The seeded schedule of a chaos run: how long to wait, what to do next, whom to hit.

Pure: :class:`Planner` decides, the run loop (:mod:`elasticps.chaos.run`) acts. Two random
streams, both from the seed, keep the schedule reproducible: the *schedule* stream draws the
gaps and the actions (kill a role, or scale the trainers), the *pick* stream draws the process
among a role's targets. The number of targets depends on timing (a restarted trainer may not have
registered yet), so were both drawn from one stream, the roles of later kills would too; with two,
the same seed kills the same roles in the same order whenever every role has a process to kill.

A *directed* schedule (:data:`SCHEDULES`, :func:`directed`) is a named, fixed sequence of steps
aimed at one known hole (e.g. a pserver killed right after its checkpoint, inside a scale step
and a resharding); the loop carries it out first, then the seeded steps.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from elasticps.chaos.targets import ROLES, Target

# The chance that a step scales the trainers instead of killing something: about one step in
# seven, so a 20-kill run also sees a few scale steps.
SCALE_CHANCE = 0.15


@dataclass(frozen=True)
class KillRole:
    """SIGKILL one process of ``role``."""

    role: str


@dataclass(frozen=True)
class ScaleTrainers:
    """Ask the launcher for ``trainers`` trainers (``launcher/desired_trainers``)."""

    trainers: int


Action = KillRole | ScaleTrainers


class Planner:
    """Gaps, actions and picks for one chaos run, from its seed."""

    def __init__(self, seed: int, trainers: int, *, scale: bool = True,
                 gap: tuple[float, float] = (0.3, 1.5)) -> None:
        self.trainers = trainers
        self.scale = scale
        self.gap_range = gap
        self._schedule = random.Random(seed)
        self._picks = random.Random(f"{seed}/pick")

    def gap(self) -> float:
        """Seconds to wait after a recovery before the next step."""
        return self._schedule.uniform(*self.gap_range)

    def next_action(self, available: Collection[str]) -> Action | None:
        """The next step, given the roles that have a process to kill now (None: nothing to
        do this time)."""
        if self.scale and self._schedule.random() < SCALE_CHANCE:
            # Around the starting count: one fewer (at least one), one more, or back to it.
            return ScaleTrainers(self._schedule.choice(
                [max(1, self.trainers - 1), self.trainers + 1, self.trainers]))
        roles = [role for role in ROLES if role in available]
        return KillRole(self._schedule.choice(roles)) if roles else None

    def pick(self, targets: Sequence[Target]) -> Target:
        """One of ``targets`` (as :func:`~elasticps.chaos.targets.targets_of` orders them)."""
        if not targets:
            raise ValueError("no target to pick from")
        return self._picks.choice(list(targets))


def preview(seed: int, kills: int, trainers: int, *, scale: bool = True,
            gap: tuple[float, float] = (0.3, 1.5)) -> list[Action]:
    """The steps a run with ``seed`` takes while every role has a process to kill: what the run
    does unless the job is too small to offer every role at every step."""
    planner = Planner(seed, trainers, scale=scale, gap=gap)
    steps: list[Action] = []
    while sum(isinstance(s, KillRole) for s in steps) < kills:
        planner.gap()
        action = planner.next_action(ROLES)
        if action is not None:  # always: every role is available
            steps.append(action)
    return steps


# -- directed schedules ------------------------------------------------------------------------
#
# A named schedule is a fixed sequence of steps the loop carries out once training is under way,
# before the seeded random steps fill up the rest of --kills. Each step says whether the loop
# waits, after it, for training to progress again (``then``: "progress") or only for the fault's
# role to serve again ("serving"), or goes straight on ("none"): a burst of faults lands inside
# one recovery, which is the point of most of them.

Then = str  # "progress" | "serving" | "none"


@dataclass(frozen=True)
class AwaitCheckpoint:
    """Wait until a pserver publishes a new checkpoint (``pserver/checkpoint/<slot>/<id>``);
    the steps after it may aim at that pserver (``slot="checkpointed"``)."""


@dataclass(frozen=True)
class KillPServer:
    """SIGKILL the pserver of ``slot``: a number, "checkpointed" (the one that published the
    awaited checkpoint) or "same" (the slot the previous KillPServer hit)."""

    slot: int | str
    then: Then = "progress"


@dataclass(frozen=True)
class DirectedScale:
    """Ask for ``trainers`` trainers."""

    trainers: int
    then: Then = "progress"


@dataclass(frozen=True)
class DirectedReshard:
    """Ask for ``pservers`` pservers (with no SIGKILL of its own: the schedule kills)."""

    pservers: int
    then: Then = "progress"


@dataclass(frozen=True)
class PauseTrainer:
    """SIGSTOP one trainer for ``seconds``, then SIGCONT it: a member that is slow, not dead,
    for longer than its lease (the rest must progress meanwhile; it then wakes up late)."""

    seconds: float
    then: Then = "progress"


@dataclass(frozen=True)
class AwaitPartition:
    """With ``--stream``: wait until a standby master is in the election, then until the
    stream's writer commits its next partition (the steps after it follow at once)."""


@dataclass(frozen=True)
class KillMaster:
    """SIGKILL the leading master."""

    then: Then = "progress"


@dataclass(frozen=True)
class KillTrainer:
    """SIGKILL one trainer (the planner's pick among this host's)."""

    then: Then = "progress"


Directed = (AwaitCheckpoint | KillPServer | DirectedScale | DirectedReshard | PauseTrainer
            | AwaitPartition | KillMaster | KillTrainer)

SCHEDULES = {
    "scale-down-kill-reshard": "right after a pserver publishes a checkpoint: scale the trainers "
                               "down by one, SIGKILL that pserver, then reshard to one pserver "
                               "more, all inside one recovery",
    "two-pserver-restores": "right after a pserver publishes a checkpoint: SIGKILL it, and as "
                            "soon as its replacement serves (restored), SIGKILL that one too: "
                            "two restores of one shard within about one task",
    "kill-trainer-then-pserver": "SIGKILL a trainer and, once training progresses again, the "
                                 "pserver of slot 0 (hybrid mode: the dense group re-forms, "
                                 "then the sparse rows recover)",
    "slow-sync-member": "SIGSTOP a trainer for 2 x the lease TTL + 1 s (its lease expires, the "
                        "others must go on without it), then SIGCONT it",
    "stream-commit-master-kill": "with --stream: SIGKILL the leading master right as the "
                                 "stream's next partition commits (a standby waiting), so the "
                                 "takeover meets a partition landed and not yet appended, or "
                                 "appended by the transaction the kill cut short",
    "stream-commit-pserver-kill": "with --stream: SIGKILL pserver 0 right as the stream's next "
                                  "partition commits, so its first tasks meet a shard "
                                  "restoring its checkpoint",
    "stream-commit-trainer-kill": "with --stream: SIGKILL a trainer right as the stream's next "
                                  "partition commits, so its tasks of the partition before "
                                  "are taken back mid-way",
    "stream-commit-kill-every-role": "with --stream: the three above in turn, each as a "
                                     "partition commits (master, pserver 0, a trainer)",
}
# Schedules that need the stream's writer (--stream).
STREAM_SCHEDULES = frozenset(name for name in SCHEDULES if name.startswith("stream-"))
_STREAM_KILLS: dict[str, Directed] = {"master": KillMaster(), "pserver": KillPServer(0),
                                      "trainer": KillTrainer()}


def directed(name: str, trainers: int, pservers: int, lease_ttl: int) -> list[Directed]:
    """The steps of schedule ``name`` (one of SCHEDULES) for a job of ``trainers`` trainers and
    ``pservers`` pservers."""
    if name == "scale-down-kill-reshard":
        return [AwaitCheckpoint(), DirectedScale(max(1, trainers - 1), then="none"),
                KillPServer("checkpointed", then="none"), DirectedReshard(pservers + 1)]
    if name == "two-pserver-restores":
        return [AwaitCheckpoint(), KillPServer("checkpointed", then="serving"),
                KillPServer("same")]
    if name == "kill-trainer-then-pserver":
        return [KillTrainer(), KillPServer(0)]
    if name == "slow-sync-member":
        return [PauseTrainer(2.0 * lease_ttl + 1.0)]
    if name == "stream-commit-kill-every-role":
        return [step for role in ("master", "pserver", "trainer")
                for step in (AwaitPartition(), _STREAM_KILLS[role])]
    if name.startswith("stream-commit-") and name.endswith("-kill"):
        role = name.removeprefix("stream-commit-").removesuffix("-kill")
        if role in _STREAM_KILLS:
            return [AwaitPartition(), _STREAM_KILLS[role]]
    raise ValueError(f"no schedule {name!r}: one of {', '.join(SCHEDULES)}")


def directed_kills(steps: Sequence[Directed]) -> int:
    """The SIGKILLs a schedule delivers (they count towards --kills)."""
    return sum(isinstance(s, KillPServer | KillMaster | KillTrainer) for s in steps)
