"""Run an iterator one step ahead in a background thread (bounded, exceptions passed through).

Used where the producer releases the GIL (pyarrow's CSV parser), so producing the next item
overlaps with consuming this one. Memory stays bounded by ``depth`` items.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterable
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


def prefetch(
    items: Iterable[T], depth: int = 2, name: str = "elasticps-prefetch"
) -> Generator[T, None, None]:
    """Yield ``items`` in order while a thread produces up to ``depth`` items ahead.

    Closing the generator early stops the thread and waits for it, so the caller may close
    whatever the producer reads from right afterwards.
    """
    slots: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, who re-raises it
            put(exc)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
