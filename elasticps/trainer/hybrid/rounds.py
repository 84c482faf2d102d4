"""One round of the dense group: what each member brings, and which gradients count (pure).

Every member of a generation runs the same sequence of rounds. In each, every member first
shares a :class:`Header` (an all-gather of a few integers): the batch it trained, if any, and
whether it leaves or saw a newcomer. From the headers and the replica's applied set, which is
the same on every member, :func:`plan_round` decides the same thing everywhere:

- a batch already applied (in the set, or below its pruning floor: a stale holder's), or named
  by a lower rank in the same round (two holders of one batch), is a *duplicate*: its member
  contributes zeros and the batch is not recorded again;
- a batch with NaN or Inf is recorded (so a retry does not bring it back) and contributes
  nothing, as the pservers skip one;
- every other batch *contributes*: the round applies the mean of the contributors' gradients
  as one optimizer step, at the learning rate of the smallest batch number among them (the
  batch's number in the job's data order, as sync mode's rounds do), and records each of them.

A round without contributors changes nothing (no optimizer step, no step count). That is what
makes a round repeatable: a member whose round failed retries the same batch in the next
generation, and if the failed round had been applied somewhere, the state the new generation
synchronised to holds the batch and the retry is a duplicate.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elasticps.pserver.applied import AppliedSet

Ref = tuple[int, int, int]  # (pass, task, seq): the unit of exactly-once


class Kind(enum.IntEnum):
    NONE = 0  # no batch this round (idle, or leaving)
    BATCH = 1  # a batch's finite gradients
    SKIPPED = 2  # a batch whose gradients hold NaN or Inf


class Flag(enum.IntFlag):
    LEAVE = 1  # this member leaves after the round
    REFORM = 2  # this member saw a newcomer: the generation ends after the round


NO_FLAGS = Flag(0)
HEADER_WIDTH = 6


@dataclass(frozen=True)
class Header:
    kind: Kind = Kind.NONE
    pass_id: int = 0
    task_id: int = 0
    seq: int = 0
    step: int = 0  # the batch's number in the job's data order (BatchRef.step)
    flags: Flag = NO_FLAGS

    @property
    def ref(self) -> Ref:
        return self.pass_id, self.task_id, self.seq

    def encode(self) -> np.ndarray:
        return np.array([int(self.kind), self.pass_id, self.task_id, self.seq, self.step,
                         int(self.flags)], dtype=np.int64)

    @classmethod
    def decode(cls, row: Sequence[int] | np.ndarray) -> Header:
        kind, pass_id, task_id, seq, step, flags = (int(v) for v in row)
        return cls(Kind(kind), pass_id, task_id, seq, step, Flag(flags))


@dataclass(frozen=True)
class RoundPlan:
    contributors: tuple[int, ...]  # ranks whose gradients make the round's mean
    recorded: tuple[Ref, ...]  # batches the round records as applied (skipped ones too)
    duplicates: tuple[int, ...]  # ranks whose batch was applied already
    batch_step: int  # the learning rate's batch number: the contributors' smallest
    leavers: tuple[int, ...]  # ranks that leave after the round
    reform: bool  # a member flagged a newcomer


def plan_round(headers: Sequence[Header], applied: AppliedSet) -> RoundPlan:
    """What round ``headers`` (one per rank, in rank order) does; see the module docstring."""
    contributors: list[int] = []
    recorded: list[Ref] = []
    duplicates: list[int] = []
    seen: set[Ref] = set()
    for rank, header in enumerate(headers):
        if header.kind is Kind.NONE:
            continue
        if header.ref in seen or applied.contains(*header.ref):
            duplicates.append(rank)
            continue
        seen.add(header.ref)
        recorded.append(header.ref)
        if header.kind is Kind.BATCH:
            contributors.append(rank)
    return RoundPlan(
        tuple(contributors), tuple(recorded), tuple(duplicates),
        min((headers[r].step for r in contributors), default=0),
        tuple(r for r, h in enumerate(headers) if h.flags & Flag.LEAVE),
        any(h.flags & Flag.REFORM for h in headers))
