"""How a shard takes pushes, one strategy per training mode, chosen once when the shard is built.

=========  ================================  =================================================
mode       a push carries                    applied once, recorded as
=========  ================================  =================================================
async      one batch's gradients             one optimizer step per batch, at once
sync       one batch's gradients             the mean of a round's batches, one step per round
geo        a window's parameter deltas       the window's delta added, every batch of it once
hybrid     one batch's sparse gradients      as async; no dense tables (the trainers hold them)
=========  ================================  =================================================

Each strategy owns its exactly-once rule across restores and layout changes (the applied set
and the earlier layouts of :mod:`~elasticps.pserver.reshard.lineage`); the shard
(:class:`~elasticps.pserver.shard.ShardState`) owns the tables, the lock, validation and the
optimizer step, and calls the strategy under its lock. A push of the wrong kind for the mode (a
gradient to a geo shard, a delta to an async one) is refused naming the mode: every role of a
job needs the same ``PADDLE_TRAINING_MODE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver.dense_tag import DenseTag
from elasticps.pserver.policy_clock import check_event_time

if TYPE_CHECKING:
    from elasticps.pserver.shard import ShardState

Rows = Mapping[str, tuple[np.ndarray, np.ndarray]]  # table -> (ids, rows)


@dataclass(frozen=True)
class BatchKey:
    """One batch of one task in one pass: the unit of exactly-once application (``ref``).
    ``step`` is its number in the job's data order, which learning-rate schedules read; it is
    not part of the batch's identity."""

    pass_id: int
    task_id: int
    seq: int
    step: int = 0
    event_time: float = 0.0  # a stream's batch: its partition's time (policy_clock.py)

    def check(self) -> None:
        if min(self.pass_id, self.task_id, self.seq, self.step) < 0:
            raise InvalidArgumentError(
                f"batch (pass {self.pass_id}, task {self.task_id}, seq {self.seq}, step "
                f"{self.step}) has a negative field; every push needs a BatchRef with pass_id, "
                "task_id, seq, step >= 0"
            )
        check_event_time(self.event_time)

    @property
    def ref(self) -> tuple[int, int, int]:
        return self.pass_id, self.task_id, self.seq


@dataclass(frozen=True)
class PushResult:
    applied: bool  # False: a duplicate of an applied batch
    skipped: bool  # True: dropped for non-finite values (still recorded as applied)
    pending: bool = False  # sync mode: its round is still open; nothing applied yet
    # Geo: the window was refused whole because part of it (not all) was applied before,
    # here or by an earlier layout; none of its batches is recorded, so they stay missing.
    partly_applied: bool = False
    # Async pushes: the dense state just before and just after this push (dense_tag.py).
    dense_before: DenseTag | None = None
    dense_after: DenseTag | None = None


@dataclass(frozen=True)
class RoundStats:
    rounds: int = 0  # sync: step barriers closed
    waiting: int = 0  # sync: batches in the open round
    members: int = 0  # sync: trainers the open round waits for


class PushMode:
    """The strategy's interface (see the module docstring). ``push`` and ``push_delta`` run
    under the shard's lock, after :meth:`check_kind` and the shard's validation."""

    name = ""
    takes_deltas = False  # geo: parameter deltas of a window; else one batch's gradients

    def __init__(self, shard: ShardState) -> None:
        self.shard = shard

    def check_declare(self, spec: pserver_pb2.TableSpec) -> None:
        """Refuse a table this mode does not hold (hybrid: a dense one), before any is made."""

    def check_kind(self, delta: bool) -> None:
        """Refuse a push of the kind this mode does not take, before anything is read."""
        if delta == self.takes_deltas:
            return
        takes, sent = ("parameter deltas", "gradients") if self.takes_deltas else (
            "gradients", "geo deltas")
        raise InvalidArgumentError(
            f"shard {self.shard.shard} runs in {self.name} mode and takes {takes}, not "
            f"{sent}: every role of a job needs the same PADDLE_TRAINING_MODE")

    def push(self, batch: BatchKey, dense: Mapping[str, np.ndarray], sparse: Rows, drop: bool,
             counts: Rows, trainer: str, wait_s: float) -> PushResult:
        raise NotImplementedError  # check_kind refused it

    def push_delta(self, batches: list[BatchKey], dense: Mapping[str, np.ndarray],
                   sparse: Rows) -> PushResult:
        raise NotImplementedError  # check_kind refused it

    def join_round(self, trainer: str) -> None:
        """Sync mode: the open round (and every later one) waits for ``trainer``'s push."""

    def leave_round(self, trainer: str) -> bool:
        """Sync mode: ``trainer`` is no longer waited for; True if it was a member."""
        return False

    def round_members(self) -> set[str]:
        return set()

    def round_stats(self) -> RoundStats:
        return RoundStats()

    @property
    def has_rounds(self) -> bool:
        return False
