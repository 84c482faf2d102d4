"""Follow the keys under a prefix for as long as a role lives, whatever the store does.

A watch can end for good: its history was compacted while it was behind, or the backend gave up
on its stream. A thread that only iterates a watch then dies (the master's trainer watch did) or
asks a dead watch forever (the pserver client's slot watch did), and its role stops noticing
deaths and new addresses. :class:`PrefixFollower` lists the prefix, watches from the listing's
revision + 1, and when the watch or a listing fails it waits (backing off) and starts over from a
fresh listing, which it hands to ``on_listing`` so the caller can reconcile what it missed.
Handlers see an event possibly twice (once in a listing, once replayed): they must be idempotent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from elasticps.errors import StoreError
from elasticps.retry import RetryPolicy
from elasticps.store.api import Event, KeyValue, Store

log = logging.getLogger(__name__)

# Between a failed watch and the next listing: 0.1 s doubling to 2 s while it keeps failing.
RESYNC_BACKOFF = RetryPolicy(deadline=float("inf"), initial_backoff=0.1, max_backoff=2.0)


class PrefixFollower:
    """Hands every change under ``prefix`` to ``on_event``; after a failure, the whole prefix
    to ``on_listing`` again (see the module docstring)."""

    def __init__(self, store: Store, prefix: str, on_event: Callable[[Event], None],
                 on_listing: Callable[[list[KeyValue]], None], *, who: str,
                 poll_s: float = 0.5) -> None:
        self.store = store
        self.prefix = prefix
        self.on_event = on_event
        self.on_listing = on_listing
        self.who = who
        self.poll_s = poll_s
        self.resyncs = 0  # listings after a failure (for tests and logs)

    def run(self, stop: threading.Event, start_revision: int | None = None) -> None:
        """Follow until ``stop``: from ``start_revision`` if the caller already listed the
        prefix at ``start_revision - 1``, else from a listing of its own."""
        backoff = RESYNC_BACKOFF.backoff()
        revision = start_revision
        while not stop.is_set():
            try:
                if revision is None:
                    revision = self.store.revision() + 1  # before the listing: replays overlap
                    self.on_listing(self.store.get_prefix(self.prefix))
                self._watch(stop, revision)
            except StoreError as exc:
                revision = None
                self.resyncs += 1
                log.warning("%s lost its watch on %s (%s); it lists the keys again and watches "
                            "from there.", self.who, self.prefix, exc)
                stop.wait(backoff.next_delay() or 0.0)
            else:
                backoff.reset()

    def _watch(self, stop: threading.Event, revision: int) -> None:
        with self.store.watch_prefix(self.prefix, revision) as watch:
            while not stop.is_set():
                event = watch.get(timeout=self.poll_s)
                if event is not None:
                    self.on_event(event)
