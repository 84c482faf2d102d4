"""``run_once``: a step that exactly one process of a job runs, whose result every caller gets.

Typical use: one trainer generates or downloads the dataset while the others wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from elasticps.errors import StoreError
from elasticps.store.api import Compare, EventType, Put, Store
from elasticps.store.keys import once_keys

log = logging.getLogger(__name__)


def run_once(store: Store, name: str, fn: Callable[[], bytes], *, owner: str,
             timeout: float = 600.0) -> bytes:
    """Run ``fn`` in exactly one process of the job; every caller gets its result (bytes).

    The first caller to create ``job/once/<name>/lock`` runs ``fn`` and publishes its result
    under ``.../done``; the others wait for it. If the winner dies before publishing, the job
    fails visibly (a timeout naming the owner) rather than running ``fn`` twice.
    """
    lock, done = once_keys(name)
    won = store.txn([Compare.missing(lock)], [Put(lock, owner.encode())]).succeeded
    if won:
        log.info("%s runs the one-time step %r for the job.", owner, name)
        value = fn()
        store.put(done, value)
        return value
    deadline = time.monotonic() + timeout
    revision = store.revision()
    kv = store.get(done)
    if kv is not None:
        return kv.value
    with store.watch_prefix(done, start_revision=revision + 1) as watch:
        while (remaining := deadline - time.monotonic()) > 0:
            event = watch.get(timeout=remaining)
            if event is not None and event.key == done and event.type is EventType.PUT:
                return event.value
    holder = store.get(lock)
    who = holder.value.decode(errors="replace") if holder else "?"
    raise StoreError(f"one-time step {name!r} run by {who} did not finish within {timeout:.0f}s")
