"""The seeded schedule of a chaos run: how long to wait, what to do next, whom to hit.

Pure: :class:`Planner` decides, the run loop (:mod:`elasticps.chaos.run`) acts. Two random
streams, both from the seed, keep the schedule reproducible: the *schedule* stream draws the
gaps and the actions (kill a role, or scale the trainers), the *pick* stream draws the process
among a role's targets. The number of targets depends on timing (a restarted trainer may not have
registered yet), so were both drawn from one stream, the roles of later kills would too; with two,
the same seed kills the same roles in the same order whenever every role has a process to kill.
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
