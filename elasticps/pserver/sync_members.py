"""Sync mode: drop from a shard's step barrier the trainers that died or are leaving.

A trainer's ``trainer/<name>`` key lives under its store lease: a DELETE means it died (or
closed), a ``leaving`` value that it is handing its tasks back. Either way no push will come
from it, so the open round must not wait for it (``ShardState.leave_round``). After a watch
gap the whole prefix is listed again and every member without a live key is dropped
(:class:`~elasticps.store.follow.PrefixFollower`). A trainer dropped by mistake (its key
reappears) simply rejoins with its next push.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from elasticps.errors import StoreValueError
from elasticps.pserver.shard import ShardState
from elasticps.store import Store
from elasticps.store.api import Event, EventType, KeyValue
from elasticps.store.follow import PrefixFollower
from elasticps.store.keys import TRAINER_PREFIX, TrainerRegistration, trainer_of

log = logging.getLogger(__name__)


def _gone(key: str, value: bytes | None) -> bool:
    """Whether this registration value means the trainer will push no more."""
    if not value:
        return True
    try:
        return TrainerRegistration.decode(value, key).leaving
    except StoreValueError:
        return False  # unreadable: not evidence of death; its lease still decides


class RoundMembers:
    """Follows ``trainer/`` for one shard (see the module docstring)."""

    def __init__(self, store: Store, state: ShardState, node: str) -> None:
        self.store, self.state, self.node = store, state, node

    def on_event(self, event: Event) -> None:
        value = None if event.type is EventType.DELETE else event.value
        if _gone(event.key, value):
            self._drop(trainer_of(event.key))

    def on_listing(self, listing: list[KeyValue]) -> None:
        live = {trainer_of(kv.key) for kv in listing if not _gone(kv.key, kv.value)}
        for name in self.state.round_members() - live:
            self._drop(name)

    def _drop(self, name: str) -> None:
        if self.state.leave_round(name):
            log.info("%s: trainer %s left the job, so sync steps no longer wait for it.",
                     self.node, name)

    @contextlib.contextmanager
    def following(self) -> Iterator[None]:
        """Follow the trainers while the block runs."""
        stop = threading.Event()
        follower = PrefixFollower(self.store, TRAINER_PREFIX, self.on_event, self.on_listing,
                                  who=self.node)
        thread = threading.Thread(target=follower.run, args=(stop,), name="sync-members",
                                  daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5.0)
