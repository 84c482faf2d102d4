"""The embedded store's polling watch: where each poll starts.

A watch reads the events table from its position on; the position must move past revisions
that hold no event for its prefix (else a quiet watch in a busy job rescans every later event
on every poll, 40 times a second, and fails once they are compacted), and must not move past
a revision whose events a poll's row limit cut in two."""

from __future__ import annotations

from pathlib import Path

from elasticps.store import job_prefix
from elasticps.store.api import Put
from elasticps.store.embedded_store import EmbeddedStore
from tests.helpers import wait_for


def test_a_quiet_watch_moves_past_other_keys_and_outlives_their_compaction(
        tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", job_prefix("watch"),
                       keep_revisions=20) as store, \
            store.watch_prefix("quiet/") as watch:
        for _ in range(10):  # 100 revisions of other keys: 5x the history the store keeps
            for _ in range(10):
                store.put("busy/k", b"x")
            busy = store.revision()
            wait_for(lambda: watch._next_rev > busy, 10,  # noqa: B023 (checked at once)
                     "the quiet watch to move past the busy revisions")
        store.put("quiet/k", b"v")
        event = watch.get(timeout=5)
    assert event is not None
    assert (event.key, event.value) == ("quiet/k", b"v")


def test_a_revision_cut_by_a_poll_limit_is_delivered_whole(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", job_prefix("watch")) as store:
        start = store.revision() + 1
        for i in range(995):
            store.put(f"w/single/{i}", b"1")
        store.txn([], [Put(f"w/txn/{i}", b"2") for i in range(10)])  # one revision, 10 events
        # The watch's first poll reads 1000 events: the 995 and half of the transaction.
        with store.watch_prefix("w/", start) as watch:
            events = [watch.get(timeout=5) for _ in range(1005)]
    assert all(event is not None for event in events)
    keys = [event.key for event in events if event is not None]
    assert keys[:995] == [f"w/single/{i}" for i in range(995)]
    assert sorted(keys[995:]) == sorted(f"w/txn/{i}" for i in range(10))
