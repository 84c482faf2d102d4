"""One retry policy for every client: a deadline, backoff with jitter, and what is worth retrying.

A :class:`RetryPolicy` is a value (frozen): the master client, the pserver client, the etcd
store, the master's persistence and plain RPC calls each hold one, built from a default with
their own deadline (``policy.within(seconds)``). Exactly one layer retries a given failure: the
layer that owns the policy; the layers around it let the error through.

Two ways to use it:

- :meth:`RetryPolicy.call` (and :meth:`RetryPolicy.call_async`) runs a function until it
  succeeds, raises an error that is not retryable, or the deadline passes (then the last error
  is raised as it was). An operation that recovers within ``quiet_for`` seconds (a busy
  server's refusal, a brief blip) is logged at DEBUG only: a thousand trainers meeting a busy
  master must not flood the logs. Past that it logs a WARNING, then one line per ``log_every``
  seconds, naming what is retried and for how long.
- :meth:`RetryPolicy.backoff` hands out the delays alone, for loops that are not "call until it
  works" (a watch re-created forever, polling a master that says "later").

Delays grow from ``initial_backoff`` by doubling up to ``max_backoff``; each is drawn uniformly
from ``[d/2, d]`` (jitter, so a crowd of trainers does not retry in lockstep) and clipped to the
time left before the deadline. The clock, the sleep and the random source are fields, so a test
can drive a policy with no real time passing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from elasticps.errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Sleeps for the given seconds. Returning True means "stop waiting and give up" (the contract of
# threading.Event.wait, so a stop event can cut a retry short); None or False means go on.
Sleep = Callable[[float], bool | None]


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying, how long to wait between tries, and which errors to retry."""

    deadline: float  # seconds from the first attempt; math.inf retries forever
    initial_backoff: float = 0.05
    max_backoff: float = 1.0
    retryable: tuple[type[BaseException], ...] = ()
    log_every: float = 10.0  # seconds between "still retrying" log lines
    quiet_for: float = 1.0  # retries within this many seconds of the first failure: DEBUG only
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    sleep: Sleep = field(default=time.sleep, repr=False, compare=False)
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.deadline >= 0:
            raise ConfigError(f"retry deadline={self.deadline!r} must be >= 0 seconds")
        if not 0 <= self.initial_backoff <= self.max_backoff:
            raise ConfigError(
                f"retry backoff initial={self.initial_backoff!r}, max={self.max_backoff!r} "
                "must satisfy 0 <= initial <= max")

    def within(self, deadline: float) -> RetryPolicy:
        """The same policy with another deadline."""
        return replace(self, deadline=deadline)

    def is_retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retryable)

    def backoff(self) -> Backoff:
        """A fresh schedule of delays; its deadline starts now."""
        return Backoff(self)

    def call(self, fn: Callable[[], T], *, what: str, sleep: Sleep | None = None,
             on_retry: Callable[[BaseException], None] | None = None) -> T:
        """``fn()`` until it returns; retryable errors are retried until the deadline.

        ``what`` names the operation and who does it, for the log ("Trainer t0: master GetTask").
        ``sleep`` overrides the policy's (e.g. a stop event's ``wait``); ``on_retry`` runs after
        each retryable failure that will be retried, before the wait.
        """
        backoff = self.backoff()
        while True:
            try:
                return fn()
            except self.retryable as exc:
                delay = self._delay_after(backoff, exc, what)
                if delay is None:
                    raise
                if on_retry is not None:
                    on_retry(exc)
                if (sleep or self.sleep)(delay) is True:
                    raise  # stopped while waiting: the caller is shutting down

    async def call_async(self, fn: Callable[[], Awaitable[T]], *, what: str) -> T:
        """:meth:`call` for a coroutine function, waiting with ``asyncio.sleep``."""
        backoff = self.backoff()
        while True:
            try:
                return await fn()
            except self.retryable as exc:
                delay = self._delay_after(backoff, exc, what)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    def _delay_after(self, backoff: Backoff, exc: BaseException, what: str) -> float | None:
        """The wait before the next attempt after ``exc`` (None: give up), logged."""
        delay = backoff.next_delay()
        if delay is None:
            if backoff.attempts:
                log.warning("%s: giving up after %.1fs of retries (deadline %gs): %s",
                            what, backoff.elapsed(), self.deadline, exc)
            return None
        now = self.clock()
        if backoff.elapsed() < self.quiet_for:
            if backoff.attempts == 1:
                log.debug("%s failed (%s); retrying with backoff.", what, exc)
        elif now - backoff.logged_at >= self.log_every:
            backoff.logged_at = now
            log.warning("%s failed (%s); retrying with backoff for up to %.0fs more "
                        "(attempt %d).", what, exc, backoff.remaining(), backoff.attempts)
        return delay


class Backoff:
    """The delays of one retried operation, by its policy; not thread-safe (one per operation)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.attempts = 0  # delays handed out since the start (or the last reset)
        self.logged_at = -math.inf  # when a retry of this operation was last logged
        self._started = policy.clock()
        self._ceiling = policy.initial_backoff

    def elapsed(self) -> float:
        return self.policy.clock() - self._started

    def remaining(self) -> float:
        return self.policy.deadline - self.elapsed()

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None once the deadline has passed."""
        remaining = self.remaining()
        if remaining <= 0:
            return None
        ceiling = self._ceiling
        self._ceiling = min(ceiling * 2, self.policy.max_backoff)
        self.attempts += 1
        return min(self.policy.rng.uniform(ceiling / 2, ceiling), remaining)

    def reset(self) -> None:
        """Start over (after a success): short delays again, and a new deadline."""
        self.attempts = 0
        self._started = self.policy.clock()
        self._ceiling = self.policy.initial_backoff
