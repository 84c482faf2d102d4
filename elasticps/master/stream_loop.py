"""The leader's stream follower: poll the partition source, decide (``stream_follow.decide``),
append (``MasterState.append_partitions``: persisted, fenced, before any task of it goes out).

One :meth:`StreamFollower.step` is one poll: it looks for the end marker first and lists
second, so a listing made after the marker was seen holds every partition the stream will ever
have. fsspec has no watch, so the follower polls: every ``min_poll_s`` while partitions keep
coming, the interval doubling while nothing lands, up to ``poll_s`` (PADDLE_STREAM_POLL_S) — a
partition is appended at most about ``poll_s`` after its manifest is written. A listing that
fails (the storage is unreachable) is shown on the status page and tried again at the next poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from elasticps.data.stream import Partition, PartitionSource
from elasticps.errors import DataError, ElasticPSError
from elasticps.master.service import MasterState
from elasticps.master.stream_follow import APPEND_LIMIT, Candidate, decide

log = logging.getLogger(__name__)

DEFAULT_MIN_POLL_S = 0.2


class StreamFollower:
    """Follows the job's stream while the leader serves (see the module docstring)."""

    def __init__(self, state: MasterState, halt: threading.Event, *, poll_s: float = 2.0,
                 min_poll_s: float = DEFAULT_MIN_POLL_S,
                 wall: Callable[[], float] = time.time) -> None:
        self.state = state
        self.halt = halt
        self.poll_s = poll_s
        self.min_poll_s = min(min_poll_s, poll_s)
        self.wall = wall
        self.polls = 0
        self._said = ""  # the last refusal or error logged: each is logged once

    def run(self) -> None:
        wait = self.min_poll_s
        while not self.halt.wait(wait):
            try:
                appended = self.step()
            except ElasticPSError as exc:  # deposed (the leader sees it), or a bad record
                log.error("Master %s of job %s could not append the stream's partitions: %s",
                          self.state.node, self.state.job, exc)
                appended = False
            wait = self.min_poll_s if appended else min(2 * wait, self.poll_s)

    def step(self) -> bool:
        """One poll; True if it appended a partition."""
        target = self.state.stream_to_follow()
        if target is None:
            return False
        source, catalog = target
        position = catalog.position
        self.polls += 1
        try:
            ended = source.ended()
            listed = [p for p in source.partitions(position.last) if p.name >= catalog.start]
            candidates = [_candidate(source, p) for p in listed[:APPEND_LIMIT]]
        except (DataError, OSError, ValueError) as exc:
            error = f"listing {source.url} failed: {type(exc).__name__}: {exc}"
            self.state.note_follow(error=error, polls=self.polls)
            self._say(error)
            return False
        decision = decide(position, candidates, ended=ended, start=catalog.start,
                          more=len(listed) > APPEND_LIMIT)
        self.state.append_partitions(decision)
        self.state.note_follow(refused=decision.refused or None, error=None,
                               end_marker=ended, listed_at=round(self.wall(), 3),
                               polls=self.polls)
        if decision.refused:
            self._say(decision.refused)
        elif decision.take:
            self._said = ""
        return bool(decision.take)

    def _say(self, problem: str) -> None:
        if problem != self._said:
            log.error("Master %s of job %s: %s", self.state.node, self.state.job, problem)
            self._said = problem


def _candidate(source: PartitionSource, partition: Partition) -> Candidate:
    """``partition`` with its manifest, or why it cannot be read (a refusal, not an error of
    the listing: the partitions before it are still appended)."""
    try:
        return Candidate(partition, source.manifest(partition))
    except DataError as exc:
        return Candidate(partition, error=str(exc))
