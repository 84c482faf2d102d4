"""The time and the pass a shard's sparse policies count in: the shard's own, or a stream's.

A sparse table's expiry (``ttl_passes``, ``ttl_seconds``) and show/click decay (``score_decay``
per pass end) need a "now" and a "current pass". A job over a dataset uses the shard's clock and
the newest pass pushed. A job over a stream (docs/data.md) has one pass that lasts as long as
the stream, so its pushes carry their partition's time (``BatchRef.event_time``), and then:

- "now" is the newest partition time pushed to the shard (it never goes back: a late batch of
  an older partition moves nothing), so ``ttl_seconds`` counts partition time;
- "the current pass" is that time in whole periods of ``period_s`` (PADDLE_STREAM_PERIOD_S, a
  day by default) since the epoch, so ``ttl_passes`` counts days of data and ``score_decay``
  applies once a day of data, as day-over-day training decays at each day's end.

So a backfill of last week expires and decays rows as last week did, whatever the wall clock.
Rows' push times are then partition times, already unix seconds: checkpoints keep them as they
are (:meth:`PolicyClock.frame`), and the newest partition time goes into the checkpoint's
counters (:data:`EVENT_TIME_COUNTER`, milliseconds), so a restored shard goes on from it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from elasticps.errors import InvalidArgumentError

EVENT_TIME_COUNTER = "stream.event_time_ms"
DEFAULT_PERIOD_S = 86_400.0


class PolicyClock:
    """A shard's policy time (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 period_s: float = DEFAULT_PERIOD_S) -> None:
        if not (math.isfinite(period_s) and period_s > 0):
            raise InvalidArgumentError(f"a stream's period of {period_s!r} seconds must be > 0")
        self.clock = clock  # the shard's clock (a test steps it)
        self.wall = wall  # unix time (a test steps it with the clock)
        self.period_s = period_s
        self.event_time = 0.0  # the newest partition time pushed; 0: the job is no stream

    @property
    def streaming(self) -> bool:
        return self.event_time > 0

    def at(self, pass_id: int, event_time: float = 0.0) -> tuple[int, float]:
        """(current pass, now) for a push of ``pass_id`` carrying ``event_time`` (0: none)."""
        if event_time > self.event_time:
            self.event_time = event_time
        if self.streaming:
            return self.epoch, self.event_time
        return pass_id, self.clock()

    @property
    def epoch(self) -> int:
        """The newest partition time in whole periods (a stream's "current pass")."""
        return int(self.event_time // self.period_s)

    def frame(self) -> tuple[float, float]:
        """(now, unix time) to convert rows' push times with: the shard's clock and the wall
        clock, or, in a stream, the partition time for both (its times are unix seconds)."""
        if self.streaming:
            return self.event_time, self.event_time
        return self.clock(), self.wall()

    def counters(self) -> dict[str, int]:
        """What a checkpoint keeps of the clock."""
        return {EVENT_TIME_COUNTER: round(self.event_time * 1000)} if self.streaming else {}

    def restore(self, counters: Mapping[str, int]) -> None:
        self.event_time = counters.get(EVENT_TIME_COUNTER, 0) / 1000.0


def check_event_time(event_time: float) -> None:
    """A push's event time must be a finite, non-negative number of unix seconds."""
    if not (math.isfinite(event_time) and 0 <= event_time < 1e11):
        raise InvalidArgumentError(f"event_time={event_time!r} must be unix seconds >= 0 "
                                   "(0: the batch has no partition time)")
