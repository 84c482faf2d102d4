"""The one retry policy, driven by a fake clock: no real time passes in these tests."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable

import pytest

from elasticps.errors import ConfigError, NotFoundError, UnavailableError
from elasticps.retry import RetryPolicy


class FakeTime:
    """A clock that moves only when someone sleeps; records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def policy(fake: FakeTime, deadline: float = 10.0, seed: int = 7, **kwargs: object) -> RetryPolicy:
    return RetryPolicy(deadline=deadline, initial_backoff=0.1, max_backoff=1.6,
                       retryable=(UnavailableError,), clock=fake.clock, sleep=fake.sleep,
                       rng=random.Random(seed), **kwargs)  # type: ignore[arg-type]


def failing(times: int, then: str = "ok",
            error: Callable[[int], BaseException] = lambda n: UnavailableError(f"try {n}"),
            ) -> tuple[Callable[[], str], list[int]]:
    """A function that raises ``error(n)`` on its first ``times`` calls, then returns ``then``."""
    calls: list[int] = []

    def fn() -> str:
        calls.append(len(calls))
        if len(calls) <= times:
            raise error(len(calls))
        return then

    return fn, calls


def test_delays_double_up_to_the_cap_with_jitter_in_the_upper_half() -> None:
    fake = FakeTime()
    backoff = policy(fake, deadline=math.inf).backoff()
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6, 1.6]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert delay is not None
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # jittered, not a fixed ladder
    again = policy(FakeTime(), deadline=math.inf).backoff()
    assert [again.next_delay() for _ in range(8)] == delays  # same seed, same delays


def test_delays_are_clipped_to_the_deadline_and_stop_after_it() -> None:
    fake = FakeTime()
    backoff = policy(fake, deadline=1.0).backoff()
    total = 0.0
    while (delay := backoff.next_delay()) is not None:
        fake.sleep(delay)
        total += delay
    assert total == pytest.approx(1.0)
    assert backoff.remaining() <= 0
    assert backoff.next_delay() is None


def test_reset_starts_over_with_short_delays_and_a_new_deadline() -> None:
    fake = FakeTime()
    backoff = policy(fake, deadline=2.0).backoff()
    for _ in range(4):
        delay = backoff.next_delay()
        assert delay is not None
        fake.sleep(delay)
    backoff.reset()
    assert backoff.attempts == 0
    assert backoff.remaining() == pytest.approx(2.0)
    first = backoff.next_delay()
    assert first is not None
    assert first <= 0.1


def test_call_retries_until_success_and_returns_the_value() -> None:
    fake = FakeTime()
    fn, calls = failing(3)
    assert policy(fake).call(fn, what="test op") == "ok"
    assert len(calls) == 4
    assert len(fake.sleeps) == 3


def test_an_error_that_is_not_retryable_is_raised_at_once() -> None:
    fake = FakeTime()
    fn, calls = failing(5, error=lambda n: NotFoundError(f"task {n} does not exist"))
    with pytest.raises(NotFoundError, match="task 1 does not exist"):
        policy(fake).call(fn, what="test op")
    assert len(calls) == 1
    assert fake.sleeps == []


def test_call_gives_up_at_the_deadline_with_the_last_error() -> None:
    fake = FakeTime()
    started = fake.now
    fn, calls = failing(10_000)
    with pytest.raises(UnavailableError) as info:
        policy(fake, deadline=5.0).call(fn, what="test op")
    assert str(info.value) == f"try {len(calls)}"  # the last error, unchanged
    assert fake.now - started == pytest.approx(5.0)
    assert 5 < len(calls) < 20  # backed off, not spinning


def test_a_zero_deadline_means_one_attempt() -> None:
    fake = FakeTime()
    fn, calls = failing(1)
    with pytest.raises(UnavailableError):
        policy(fake, deadline=0.0).call(fn, what="test op")
    assert len(calls) == 1
    assert fake.sleeps == []


def test_an_infinite_deadline_never_gives_up() -> None:
    fake = FakeTime()
    fn, calls = failing(500)
    assert policy(fake, deadline=math.inf).call(fn, what="test op") == "ok"
    assert len(calls) == 501
    assert max(fake.sleeps) <= 1.6


def test_a_sleep_that_reports_a_stop_ends_the_retry() -> None:
    fake = FakeTime()
    fn, calls = failing(10)
    waited: list[float] = []

    def stopped(seconds: float) -> bool:  # like threading.Event.wait on a set event
        waited.append(seconds)
        return True

    with pytest.raises(UnavailableError, match="try 1"):
        policy(fake).call(fn, what="test op", sleep=stopped)
    assert len(calls) == 1
    assert len(waited) == 1
    assert fake.sleeps == []  # the per-call sleep replaced the policy's


def test_on_retry_sees_every_failure_that_is_retried() -> None:
    fake = FakeTime()
    fn, _ = failing(3)
    seen: list[str] = []
    policy(fake).call(fn, what="test op", on_retry=lambda exc: seen.append(str(exc)))
    assert seen == ["try 1", "try 2", "try 3"]


def test_retries_are_logged_once_then_every_log_every_seconds(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    fn, calls = failing(10_000)
    with caplog.at_level(logging.WARNING, logger="elasticps.retry"), \
            pytest.raises(UnavailableError):
        policy(fake, deadline=30.0, log_every=10.0).call(fn, what="Trainer t0: master GetTask")
    lines = [r.getMessage() for r in caplog.records]
    retrying = [line for line in lines if "retrying" in line]
    assert 3 <= len(retrying) <= 4  # at t~1, ~11, ~21 (and ~30 at most), not once per attempt
    assert len(calls) > 2 * len(retrying)
    assert all(line.startswith("Trainer t0: master GetTask failed (try ") for line in retrying)
    assert lines[-1].startswith("Trainer t0: master GetTask: giving up after 30.0s")


def test_an_operation_that_recovers_within_quiet_for_logs_no_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    fn, calls = failing(3)  # waits of at most 0.1 + 0.2 + 0.4 s: recovered within 1 s
    with caplog.at_level(logging.DEBUG, logger="elasticps.retry"):
        policy(fake, deadline=30.0).call(fn, what="Trainer t0: master GetTask")
    assert len(calls) == 4
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]  # the first retry, quietly
    assert caplog.records[0].getMessage().startswith("Trainer t0: master GetTask failed (try 1)")


def test_within_changes_only_the_deadline() -> None:
    base = RetryPolicy(deadline=300.0, initial_backoff=0.1, max_backoff=2.0,
                       retryable=(UnavailableError,))
    short = base.within(5.0)
    assert short.deadline == 5.0
    assert (short.initial_backoff, short.max_backoff, short.retryable) == \
        (0.1, 2.0, (UnavailableError,))
    assert short.is_retryable(UnavailableError("x"))
    assert not short.is_retryable(NotFoundError("x"))


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"deadline": -1.0}, "deadline=-1.0"),
    ({"deadline": math.nan}, "deadline=nan"),
    ({"deadline": 1.0, "initial_backoff": 2.0, "max_backoff": 1.0}, "initial=2.0, max=1.0"),
    ({"deadline": 1.0, "initial_backoff": -0.1}, "initial=-0.1"),
])
def test_bad_settings_are_refused_naming_the_value(kwargs: dict[str, float],
                                                   fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_call_async_retries_a_coroutine_and_gives_up_at_the_deadline() -> None:
    fake = FakeTime()
    # No backoff, and each attempt costs a second of the fake clock: nothing really waits.
    eager = RetryPolicy(deadline=3.5, initial_backoff=0.0, max_backoff=0.0,
                        retryable=(UnavailableError,), clock=fake.clock)
    attempts: list[float] = []

    async def flaky(failures: int) -> str:
        attempts.append(fake.now)
        fake.now += 1.0
        if len(attempts) <= failures:
            raise UnavailableError(f"try {len(attempts)}")
        return "ok"

    assert asyncio.run(eager.call_async(lambda: flaky(2), what="test op")) == "ok"
    assert len(attempts) == 3
    attempts.clear()
    with pytest.raises(UnavailableError, match="try 4"):
        asyncio.run(eager.call_async(lambda: flaky(100), what="test op"))
    assert len(attempts) == 4  # at +0, +1, +2, +3; at +4 the deadline of 3.5 has passed
