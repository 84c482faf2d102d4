"""Who is in hybrid mode's dense group, and what one trainer does about it: pure decisions.

The group lives as a sequence of *generations*. Each is one record in the store,
``hybrid/group`` (:class:`~elasticps.store.keys.GroupRecord`), replaced only by compare-and-set:
its number, its members in rank order, and where they meet. A trainer takes part by putting
``hybrid/member/<id>`` under its trainer lease, so the key vanishes when the trainer dies (its
lease expires, ≤ ``PADDLE_LEASE_TTL``) exactly when the master hands its tasks back. The record
is written only from what the store says: a proposal names every live member key. No member is
left out while its key lives (a slow member is waited for, up to the collective timeout); a
dead one is left out once its lease has expired. The record's ``mod_revision`` is the fencing
token of its generation: a dense checkpoint is published only while it holds
(:mod:`~elasticps.trainer.hybrid.checkpoints`), so a member of an ended generation publishes
nothing.

One member's lifecycle, stepped by :meth:`Membership.decide` with what the store shows::

    OUTSIDE --a live record names me, newer than every generation I ended--> GATHERING
    OUTSIDE --a live generation without me--> wait: its members take me in at their next
            round (they see my key and flag it), or after ``patience`` s I propose anyway
    OUTSIDE --no usable record--> propose the next generation: every live member key
    GATHERING --every member arrived, the state synchronised--> ACTIVE  (formed())
    GATHERING | ACTIVE --the record moved on, or a member's key vanished--> abandon: OUTSIDE
    ACTIVE --a round flagged a leaver or a newcomer, or a collective failed--> OUTSIDE (end())
    any --leave()--> LEFT

A generation that ended for a member is never gathered again by it (``ended``), so a member
re-forms by moving forward only. The engine (:mod:`~elasticps.trainer.hybrid.group`) carries the
decisions out: the rendezvous, the collectives, the store writes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from elasticps.store.keys import GroupRecord


class Phase(enum.Enum):
    OUTSIDE = "outside"  # in no generation: adopt or propose the next one
    GATHERING = "gathering"  # a generation names me: its members meet and synchronise
    ACTIVE = "active"  # stepping rounds in the generation
    LEFT = "left"  # gone for good


@dataclass(frozen=True)
class View:
    """What the store shows a member: the current record (None: none yet) with its
    mod_revision, and the live member keys' ids."""

    record: GroupRecord | None
    revision: int
    live: frozenset[str]


@dataclass(frozen=True)
class Register:
    """My member key is missing (never put, or my lease expired): put it under my lease."""


@dataclass(frozen=True)
class Propose:
    """Write the record of ``generation`` with ``members`` if the record's mod_revision is
    still ``expected_revision`` (0: no record yet); a stale proposer adopts the winner's."""

    generation: int
    members: tuple[str, ...]
    expected_revision: int


@dataclass(frozen=True)
class Gather:
    """Meet the members of ``record`` (rendezvous, state synchronisation)."""

    record: GroupRecord
    revision: int


@dataclass(frozen=True)
class Wait:
    """Nothing to do yet; ``reason`` says what for (logs and tests)."""

    reason: str


@dataclass(frozen=True)
class Step:
    """ACTIVE and whole: run the next round; ``reform`` flags it (a newcomer waits)."""

    reform: bool = False


@dataclass(frozen=True)
class Abandon:
    """The generation I am in (or gathering) is over: the record moved on or a member died."""

    reason: str


Action = Register | Propose | Gather | Wait | Step | Abandon


@dataclass
class Membership:
    """One member's view of its place in the group (see the module docstring). ``me`` is its
    member id; ``patience`` how long a newcomer waits for a live generation to take it in."""

    me: str
    patience: float
    phase: Phase = Phase.OUTSIDE
    current: GroupRecord | None = None  # the generation gathered or stepped in
    revision: int = 0  # its record's mod_revision: the fencing token
    ended: int = 0  # the newest generation that ended for me
    leavers: frozenset[str] = frozenset()  # announced their leave: never proposed again
    # (a member id names one process: a trainer that comes back is a new member)
    waiting_since: float | None = None  # a newcomer's wait for a live generation
    log: list[str] = field(default_factory=list)  # why each generation ended (tests, logs)

    def decide(self, view: View, now: float) -> Action:
        if self.phase is Phase.LEFT:
            return Wait("left the group")
        if self.phase in (Phase.ACTIVE, Phase.GATHERING):
            return self._while_in(view)
        return self._outside(view, now)

    def _while_in(self, view: View) -> Action:
        current = self.current
        assert current is not None
        if view.revision != self.revision:
            newer = view.record.generation if view.record is not None else "none"
            return Abandon(f"the group record moved on from generation {current.generation} "
                           f"(now {newer})")
        if self.me not in view.live:
            return Abandon("this trainer's member key is gone (its lease expired)")
        gone = sorted(set(current.members) - view.live)
        if gone:
            return Abandon(f"member(s) {', '.join(gone)} left the store (their lease expired)")
        if self.phase is Phase.GATHERING:
            return Wait(f"gathering generation {current.generation}")
        return Step(reform=bool(view.live - set(current.members) - self.leavers))

    def _outside(self, view: View, now: float) -> Action:
        if self.me not in view.live:
            return Register()
        record = view.record
        if record is not None and record.generation > self.ended:
            if self.me in record.members:
                return Gather(record, view.revision)
            if view.live & set(record.members):
                # A live generation without me: its members see my key and re-form at their
                # next round. Proposing now would abort their step; do it only if they never do.
                if self.waiting_since is None:
                    self.waiting_since = now
                if now - self.waiting_since < self.patience:
                    return Wait(f"generation {record.generation} has not taken this member in "
                                "yet")
        newest = max(record.generation if record is not None else 0, self.ended)
        members = (view.live - self.leavers) | {self.me}
        return Propose(newest + 1, tuple(sorted(members)), view.revision)

    # -- what the engine reports --------------------------------------------------------------

    def gathering(self, record: GroupRecord, revision: int) -> None:
        """The engine meets ``record``'s members (after a Gather, or its own winning Propose)."""
        self.phase, self.current, self.revision = Phase.GATHERING, record, revision
        self.waiting_since = None

    def formed(self) -> None:
        """Every member arrived and the state is synchronised: rounds may run."""
        assert self.phase is Phase.GATHERING
        self.phase = Phase.ACTIVE

    def end(self, reason: str) -> None:
        """The generation I was in (or gathering) is over for me; I never gather it again."""
        if self.current is not None:
            self.ended = max(self.ended, self.current.generation)
            self.log.append(f"generation {self.current.generation}: {reason}")
        if self.phase is not Phase.LEFT:
            self.phase = Phase.OUTSIDE
        self.current, self.revision = None, 0

    def after_round(self, leavers: frozenset[str], reform: bool) -> bool:
        """A round completed; True if it ended the generation (someone leaves, or a newcomer
        was flagged): every member saw the same flags, so all end it at this round."""
        if not leavers and not reform:
            return False
        self.leavers = self.leavers | leavers
        what = ([f"{', '.join(sorted(leavers))} left"] if leavers else []) + (
            ["a newcomer waits"] if reform else [])
        self.end(" and ".join(what))
        return True

    def leave(self) -> None:
        self.end("this member left")
        self.phase = Phase.LEFT
