"""One contract for every store backend: each test runs against a real etcd and the embedded store.

Cross-process cases (CAS races, election handover after SIGKILL, a deposed leader) run real
worker processes (``tests/contract/store_worker.py``).
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aetcd
import pytest

from elasticps.errors import (
    ConfigError,
    LeaseExpiredError,
    NotLeaderError,
    StoreError,
    StoreUnavailableError,
)
from elasticps.store import (
    Compare,
    Delete,
    EventType,
    Put,
    Store,
    job_prefix,
    open_store,
)
from elasticps.store._common import MAX_VALUE_BYTES
from elasticps.store.election import Election, leader_value
from elasticps.store.embedded_store import EmbeddedStore
from elasticps.store.etcd_store import EtcdStore
from tests.etcd_server import EtcdServer, free_port
from tests.helpers import REPO, wait_for

TTL = 2  # seconds; small to keep the suite fast, large enough for a loaded 2-core machine



@pytest.fixture(params=["etcd", "embedded"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd_server")
        return server.url
    return f"file://{tmp_path}/job.db"


@pytest.fixture
def store(store_url: str, job_name: str) -> Iterator[Store]:
    with open_store(store_url, job_name) as opened:
        yield opened


def spawn_worker(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.contract.store_worker", *args],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
    )


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The worker's next stdout line, or an AssertionError after ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if selector.select(timeout=left):
                return proc.stdout.readline().decode().strip()
    raise AssertionError(f"worker {proc.pid} printed nothing within {timeout}s")


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


# -- key-value basics ------------------------------------------------------------------------

def test_put_get_delete_track_revisions(store: Store) -> None:
    assert store.get("a") is None
    rev1 = store.put("a", b"one")
    kv = store.get("a")
    assert kv is not None
    assert (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease) == (
        "a", b"one", rev1, rev1, 1, 0)
    rev2 = store.put("a", b"two")
    assert rev2 > rev1
    kv = store.get("a")
    assert kv is not None
    assert (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"two", rev1, rev2, 2)
    assert store.revision() == rev2
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert store.get("a") is None


def test_prefix_listing_is_sorted_and_scoped(store: Store, store_url: str, job_name: str) -> None:
    for key in ["p/c", "p/a", "p/b/x", "q/a", "pz"]:
        store.put(key, key.encode())
    assert [kv.key for kv in store.get_prefix("p/")] == ["p/a", "p/b/x", "p/c"]
    assert [kv.key for kv in store.get_prefix("")] == ["p/a", "p/b/x", "p/c", "pz", "q/a"]
    # Another job on the same store sees none of it: keys live under the job prefix.
    with open_store(store_url, job_name + "-other") as other:
        assert other.get_prefix("") == []
        other.put("p/a", b"theirs")
    assert store.get("p/a") is not None
    assert store.get("p/a").value == b"p/a"
    assert store.delete_prefix("p/") == 3
    assert [kv.key for kv in store.get_prefix("")] == ["pz", "q/a"]


def test_txn_applies_exactly_one_branch_atomically(store: Store) -> None:
    store.put("k", b"v1")
    ok = store.txn([Compare.value("k", b"v1"), Compare.missing("absent")],
                   [Put("k", b"v2"), Put("other", b"o")], [Put("failed", b"f")])
    assert ok.succeeded
    assert store.get("k").value == b"v2"  # type: ignore[union-attr]
    assert store.get("other") is not None
    assert store.get("failed") is None
    bad = store.txn([Compare.value("k", b"v1")], [Put("k", b"v3")],
                    [Put("failed", b"f"), Delete("other")])
    assert not bad.succeeded
    assert store.get("k").value == b"v2"  # type: ignore[union-attr]
    assert store.get("failed") is not None
    assert store.get("other") is None
    kv = store.get("k")
    assert kv is not None
    assert store.txn([Compare.mod_revision("k", kv.mod_revision),
                      Compare.create_revision("k", kv.create_revision)], [Delete("k")]).succeeded
    assert store.get("k") is None
    # A value compare on a missing key fails, as in etcd.
    assert not store.txn([Compare.value("k", b"")], [Put("k", b"x")]).succeeded


def test_a_txn_that_creates_a_key_reports_its_create_revision(store: Store) -> None:
    """A pserver fences its checkpoints on the create_revision of the slot key it claimed,
    taken from the claiming transaction's result."""
    created = store.txn([Compare.missing("slot")], [Put("slot", b"me")])
    kv = store.get("slot")
    assert created.succeeded
    assert kv is not None
    assert kv.create_revision == created.revision
    store.delete("slot")
    assert store.txn([Compare.create_revision("slot", created.revision)],
                     [Put("ckpt", b"x")]).succeeded is False


def test_compare_and_set_hands_a_stale_writer_the_current_state(store: Store) -> None:
    written, current = store.compare_and_set("cas", b"1", 0)
    assert written
    assert current is not None
    assert current.value == b"1"
    written, current = store.compare_and_set("cas", b"stale", 0)
    assert not written
    assert current is not None
    assert current.value == b"1"
    written, current = store.compare_and_set("cas", b"2", current.mod_revision)
    assert written
    assert current is not None
    assert current.value == b"2"


def test_bad_input_is_refused_by_name_and_changes_nothing(store: Store) -> None:
    store.put("keep", b"x")
    before = store.revision()
    with pytest.raises(ConfigError, match="non-empty str"):
        store.put("", b"x")
    with pytest.raises(ConfigError, match="must be bytes"):
        store.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'big' is 1048577 bytes"):
        store.put("big", b"x" * (MAX_VALUE_BYTES + 1))
    with pytest.raises(ConfigError, match="ttl"):
        store.grant_lease(0)
    with pytest.raises(ConfigError, match="needs an int"):
        store.txn([Compare.mod_revision("keep", -1)], [Put("k", b"x")])
    with pytest.raises(ConfigError, match="Put or Delete"):
        store.txn([], [("k", b"x")])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="start_revision"):
        store.watch_prefix("", start_revision=0)
    assert store.revision() == before
    assert [kv.key for kv in store.get_prefix("")] == ["keep"]
    store.put("big", b"x" * MAX_VALUE_BYTES)  # the limit itself is fine on both backends
    assert len(store.get("big").value) == MAX_VALUE_BYTES  # type: ignore[union-attr]


def test_bad_urls_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="redis://x"):
        open_store("redis://x", "job")
    with pytest.raises(ConfigError, match="host:port"):
        open_store("etcd://nohost", "job")
    with pytest.raises(ConfigError, match="file:///path"):
        open_store("file://relative/job.db", "job")


@pytest.mark.slow
def test_cas_increments_from_racing_processes_are_never_lost(
        store: Store, store_url: str, job_name: str,
        workers: list[subprocess.Popen[bytes]]) -> None:
    procs, increments = 4, 25
    for _ in range(procs):
        workers.append(spawn_worker("cas", store_url, job_name, "counter", str(increments)))
    attempts = 0
    for proc in workers:
        line = read_line(proc, timeout=60)
        assert line.startswith("done "), line
        attempts += int(line.split()[1])
        assert proc.wait(timeout=10) == 0
    kv = store.get("counter")
    assert kv is not None
    assert int(kv.value) == procs * increments
    assert kv.version == procs * increments  # every successful CAS wrote exactly once
    assert attempts >= procs * increments


# -- leases ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_lease_expiry_removes_keys_and_emits_delete_events(store: Store) -> None:
    lease = store.grant_lease(1)
    start = store.put("member/a", b"a", lease=lease.id) + 1
    store.put("member/b", b"b", lease=lease.id)
    store.put("member/plain", b"p")
    assert store.get("member/a").lease == lease.id  # type: ignore[union-attr]
    with store.watch_prefix("member/", start) as watch:
        wait_for(lambda: store.get("member/a") is None and store.get("member/b") is None,
                 timeout=5, what="leased keys to vanish")
        assert store.get("member/plain") is not None
        seen = [watch.get(timeout=5) for _ in range(4)]
    assert [(e.type, e.key) for e in seen if e is not None] == [
        (EventType.PUT, "member/b"), (EventType.PUT, "member/plain"),
        (EventType.DELETE, "member/a"), (EventType.DELETE, "member/b")]
    assert seen[2].revision == seen[3].revision  # type: ignore[union-attr]  # one expiry, one rev
    with pytest.raises(LeaseExpiredError):
        lease.refresh()
    with pytest.raises(LeaseExpiredError):
        store.put("member/late", b"x", lease=lease.id)
    assert store.get("member/late") is None


@pytest.mark.slow
def test_keepalive_keeps_leased_keys_past_several_ttls(store: Store) -> None:
    lease = store.grant_lease(1)
    start = store.put("alive", b"yes", lease=lease.id) + 1
    lease.keep_alive()
    with store.watch_prefix("alive", start) as watch:
        # Four TTLs with no event at all: the key was never deleted.
        assert watch.get(timeout=4.0) is None
    assert store.get("alive") is not None
    assert not lease.expired
    lease.revoke()
    assert lease.expired
    wait_for(lambda: store.get("alive") is None, timeout=3, what="revoked lease's key to vanish")
    lease.revoke()  # idempotent


# -- watches ---------------------------------------------------------------------------------

def test_watch_replays_puts_and_deletes_in_order_from_a_revision(store: Store) -> None:
    store.put("w/early", b"0")
    start = store.put("w/a", b"1")
    store.put("w/b", b"2")
    store.put("elsewhere", b"x")
    store.delete("w/a")
    store.txn([], [Put("w/c", b"3"), Delete("w/b")])
    with store.watch_prefix("w/", start) as watch:
        store.put("w/a", b"4")
        got = [watch.get(timeout=5) for _ in range(6)]
        assert watch.get(timeout=0.3) is None
    assert [(e.type, e.key, e.value) for e in got if e is not None] == [
        (EventType.PUT, "w/a", b"1"), (EventType.PUT, "w/b", b"2"),
        (EventType.DELETE, "w/a", b""), (EventType.PUT, "w/c", b"3"),
        (EventType.DELETE, "w/b", b""), (EventType.PUT, "w/a", b"4")]
    revisions = [e.revision for e in got if e is not None]
    assert revisions == sorted(revisions)
    assert revisions[0] == start
    assert revisions[3] == revisions[4]  # one txn, one revision


def test_watch_from_now_sees_only_later_events(store: Store) -> None:
    store.put("n/old", b"old")
    with store.watch_prefix("n/") as watch:
        store.put("n/new", b"new")
        event = watch.get(timeout=5)
    assert event is not None
    assert event.key == "n/new"


def test_watch_of_compacted_history_fails_clearly(store_url: str, job_name: str,
                                                  tmp_path: Path) -> None:
    if store_url.startswith("file://"):
        store: Store = EmbeddedStore(tmp_path / "small.db", job_prefix(job_name),
                                     keep_revisions=20)
    else:
        store = open_store(store_url, job_name)
    with store:
        first = store.put("c/k", b"0")
        for i in range(60):
            store.put("c/k", str(i).encode())
        if store_url.startswith("etcd://"):
            host, port = store_url[len("etcd://"):].split(":")

            async def compact() -> None:
                async with aetcd.Client(host=host, port=int(port)) as client:
                    await client.compact(store.revision())

            asyncio.run(compact())
        with store.watch_prefix("c/", first) as watch, pytest.raises(StoreError,
                                                                     match="compacted"):
            watch.get(timeout=5)


# -- waiting for a delete ----------------------------------------------------------------------

def test_wait_deleted_sees_a_delete_and_times_out_when_nothing_happens(store: Store) -> None:
    revision = store.put("lock", b"held")
    assert not store.wait_deleted("lock", revision + 1, timeout=0.3)
    assert store.get("lock") is not None  # waiting changed nothing
    store.delete("lock")
    assert store.wait_deleted("lock", revision + 1, timeout=5)


@pytest.mark.slow
def test_wait_deleted_wakes_when_the_holders_lease_expires(store: Store) -> None:
    lease = store.grant_lease(1)  # never refreshed: the holder "died" at once
    revision = store.put("lock", b"held", lease=lease.id)
    granted = time.monotonic()
    assert store.wait_deleted("lock", revision + 1, timeout=10)
    assert store.get("lock") is None
    # etcd expires leases on its own clock (up to about half a second late); the embedded
    # store's waiter sleeps until the expiry time and reaps the lease itself.
    assert time.monotonic() - granted < 2.5


# -- election --------------------------------------------------------------------------------

@pytest.mark.slow
def test_election_hands_over_within_ttl_plus_one_second_after_sigkill(
        store: Store, store_url: str, job_name: str,
        workers: list[subprocess.Popen[bytes]]) -> None:
    holder = spawn_worker("hold", store_url, job_name, "master/election", str(TTL), "first")
    workers.append(holder)
    assert read_line(holder, timeout=30).startswith("leader ")
    assert leader_value(store, "master/election") == b"first"
    successor = Election(store, "master/election", b"second", TTL)
    assert not successor.campaign(timeout=0.2)  # the holder is alive and keeps its lease
    holder.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    holder.wait(timeout=10)
    assert successor.campaign(timeout=TTL + 5)
    handover = time.monotonic() - killed_at
    assert handover < TTL + 1, f"handover took {handover:.2f}s"
    assert successor.is_leader
    assert leader_value(store, "master/election") == b"second"
    assert successor.leader_txn([Put("state", b"new")]).succeeded
    successor.resign()
    assert leader_value(store, "master/election") is None


@pytest.mark.slow
def test_deposed_leader_write_is_refused(store: Store, store_url: str, job_name: str,
                                         workers: list[subprocess.Popen[bytes]]) -> None:
    old = spawn_worker("hold", store_url, job_name, "master/election", str(TTL), "old")
    workers.append(old)
    assert read_line(old, timeout=30).startswith("leader ")
    old.send_signal(signal.SIGSTOP)  # a long GC pause: its keepalive stops too
    try:
        new = Election(store, "master/election", b"new", TTL)
        assert new.campaign(timeout=TTL + 5)
    finally:
        old.send_signal(signal.SIGCONT)
    assert old.stdin is not None
    old.stdin.write(b"write\n")
    assert read_line(old, timeout=15) == "refused"
    assert store.get("state") is None  # the old leader changed nothing
    assert new.leader_txn([Put("state", b"new")]).succeeded
    assert store.get("state").value == b"new"  # type: ignore[union-attr]


def test_leader_txn_separates_lost_lock_from_failed_extra_compare(store: Store) -> None:
    election = Election(store, "lock", b"me", TTL)
    with pytest.raises(NotLeaderError):
        election.fencing()
    assert election.campaign(timeout=5)
    result = election.leader_txn([Put("x", b"1")], extra_compares=[Compare.value("x", b"no")])
    assert not result.succeeded
    assert store.get("x") is None
    election.lease.revoke()  # the lock goes with the lease
    with pytest.raises(NotLeaderError):
        election.leader_txn([Put("x", b"1")])
    assert store.get("x") is None
    assert election.campaign(timeout=5)  # a fresh lease, a fresh token
    assert election.leader_txn([Put("x", b"2")]).succeeded


# -- etcd only: surviving the server's crash -------------------------------------------------

@pytest.fixture(scope="module")
def private_etcd() -> Iterator[EtcdServer]:
    """An etcd of our own to kill, so the session's shared etcd stays up for other tests."""
    server = EtcdServer()
    server.start()
    yield server
    server.stop()


@pytest.mark.slow
def test_etcd_watch_survives_kill_and_restart_without_missing_an_event(
        private_etcd: EtcdServer, job_name: str) -> None:
    prefix = job_prefix(job_name)
    store = EtcdStore.from_url(private_etcd.url, prefix, retry_for=30)
    impatient = EtcdStore.from_url(private_etcd.url, prefix, retry_for=0.5)
    try:
        watch = store.watch_prefix("r/")
        lease = store.grant_lease(TTL)
        lease.keep_alive()
        before = store.put("r/before", b"1", lease=lease.id)
        private_etcd.kill()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="no endpoint answered"):
            impatient.get("r/before")
        assert time.monotonic() - started < 5
        # A write issued while etcd is down waits for it (retry with backoff) instead of failing.
        during: list[int] = []
        writer = threading.Thread(target=lambda: during.append(store.put("r/during", b"2")))
        writer.start()
        private_etcd.start()
        writer.join(timeout=30)
        after = store.put("r/after", b"3")
        later = store.put("r/later", b"4")
        got = [watch.get(timeout=15) for _ in range(4)]
        assert watch.get(timeout=0.3) is None  # and nothing twice
        assert [(e.key, e.revision) for e in got if e is not None] == [
            ("r/before", before), ("r/during", during[0]), ("r/after", after),
            ("r/later", later)]
        assert not lease.expired
        assert store.get("r/before") is not None  # etcd restored the lease; keepalive goes on
        watch.cancel()
    finally:
        impatient.close()
        store.close()


def test_etcd_endpoints_are_tried_in_order(private_etcd: EtcdServer, job_name: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    url = f"etcd://{dead},{private_etcd.endpoint}"
    with EtcdStore.from_url(url, job_prefix(job_name), retry_for=5) as store:
        with store.watch_prefix("e/") as watch:
            revision = store.put("e/k", b"v")
            event = watch.get(timeout=10)
        assert event is not None
        assert (event.key, event.revision) == ("e/k", revision)
        assert store.get("e/k").value == b"v"  # type: ignore[union-attr]
