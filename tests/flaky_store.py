"""A real store whose first watch under one prefix ends at once, as a compacted one does."""

from __future__ import annotations

from typing import Any

from elasticps.errors import StoreError
from elasticps.store._common import QueueWatch
from elasticps.store.api import Store, Watch


class WatchFailsOnce:
    """Everything is ``store``'s, except that the first watch under ``prefix`` fails with the
    error a watch gets when the history it needs was compacted."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self.failed = 0

    def watch_prefix(self, prefix: str, start_revision: int | None = None) -> Watch:
        if prefix == self.prefix and not self.failed:
            self.failed += 1
            dead = QueueWatch()
            dead.fail(StoreError(f"watch on {prefix} needs events from revision "
                                 f"{start_revision}, but they were compacted"))
            return dead
        return self.store.watch_prefix(prefix, start_revision)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)
