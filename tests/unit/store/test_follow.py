"""Following a prefix through a watch that ends for good: the master's trainers, a trainer's
pservers (hole 6: both used to stop noticing changes after one watch failure)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.pserver.client import PServerClient
from elasticps.store import Store, open_store
from elasticps.store.follow import PrefixFollower
from elasticps.store.keys import PSERVER_SLOT_PREFIX, PServerSlot, pserver_slot
from tests.flaky_store import WatchFailsOnce
from tests.helpers import wait_for


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def test_a_failed_watch_is_recreated_from_a_fresh_listing(store: Store) -> None:
    flaky = WatchFailsOnce(store, "p/")
    events: list[str] = []
    listings: list[list[str]] = []
    follower = PrefixFollower(flaky, "p/", lambda e: events.append(e.key),  # type: ignore[arg-type]
                              lambda kvs: listings.append([kv.key for kv in kvs]), who="test",
                              poll_s=0.05)
    store.put("p/before", b"1")
    stop = threading.Event()
    thread = threading.Thread(target=follower.run, args=(stop, store.revision() + 1))
    thread.start()
    try:
        wait_for(lambda: follower.resyncs == 1 and listings, 10, "a listing after the failure")
        assert listings[0] == ["p/before"]
        store.put("p/after", b"2")
        wait_for(lambda: "p/after" in events, 10, "the event after the failure")
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_pserver_client_follows_a_new_slot_address_after_its_watch_failed(
        store: Store) -> None:
    client = PServerClient(WatchFailsOnce(store, PSERVER_SLOT_PREFIX),  # type: ignore[arg-type]
                           "token", 1, deadline=5)
    try:
        assert client.addresses() == [None]
        store.put(pserver_slot(0), PServerSlot("10.0.0.1:7164", pid=1, host="h").encode())
        wait_for(lambda: client.addresses() == ["10.0.0.1:7164"], 10,
                 "the client to see the pserver's address")
        store.put(pserver_slot(0), PServerSlot("10.0.0.2:7164", pid=2, host="h").encode())
        wait_for(lambda: client.addresses() == ["10.0.0.2:7164"], 10,
                 "the client to follow the restarted pserver")
    finally:
        client.close()
