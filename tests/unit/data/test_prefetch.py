from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from elasticps.data.prefetch import prefetch


def test_prefetch_keeps_order_and_passes_errors_through() -> None:
    assert list(prefetch(range(100), depth=3)) == list(range(100))

    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("bad block 2")

    stream = prefetch(failing())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="bad block 2"):
        next(stream)


def test_closing_early_stops_the_producer_thread() -> None:
    produced = []

    def endless() -> Iterator[int]:
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    stream = prefetch(endless(), depth=2, name="test-prefetch")
    assert next(stream) == 0
    stream.close()  # joins the thread before returning
    assert not any(t.name == "test-prefetch" for t in threading.enumerate())
    assert len(produced) <= 4  # one consumed, at most depth queued, one waiting to be put
