"""The embedded store's wait for a delete (a standby master's wait in the election): no busy
polling, yet a dead holder's lock is seen gone as soon as its lease expires."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from elasticps.errors import StoreError
from elasticps.store import job_prefix
from elasticps.store.embedded_store import IDLE_POLL_S, EmbeddedStore


@pytest.mark.slow
def test_waiting_on_a_live_lock_reads_the_store_a_few_times_a_second(tmp_path: Path) -> None:
    # No reaper thread and a lease far from expiry: every statement seen is the wait's own.
    with EmbeddedStore(tmp_path / "job.db", job_prefix("wait"), reap_interval=3600) as store:
        lease = store.grant_lease(60)
        revision = store.put("lock", b"held", lease=lease.id)
        reads: list[str] = []
        store._conn.set_trace_callback(reads.append)
        started = time.monotonic()
        assert not store.wait_deleted("lock", revision + 1, timeout=1.0)
        waited = time.monotonic() - started
        store._conn.set_trace_callback(None)
    looks = [r for r in reads if "FROM kv" in r]
    # A poll every IDLE_POLL_S (plus the first look); the watch it replaces polled every 25 ms.
    assert 2 <= len(looks) <= waited / IDLE_POLL_S + 2, looks


@pytest.mark.slow
def test_a_dead_holders_lock_is_seen_gone_right_after_its_lease_expires(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "job.db", job_prefix("wait"), reap_interval=3600) as store:
        lease = store.grant_lease(1)  # never refreshed; no reaper: the waiter reaps it
        revision = store.put("lock", b"held", lease=lease.id)
        expires = store._conn.execute("SELECT expires_at FROM leases WHERE id=?",
                                      (lease.id,)).fetchone()[0]
        assert store.wait_deleted("lock", revision + 1, timeout=10)
        late = time.clock_gettime(time.CLOCK_MONOTONIC) - expires
        assert store.get("lock") is None
    assert late < 0.2, f"the expiry was seen {late:.3f}s late"


def test_closing_the_store_ends_a_wait_with_an_error(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "job.db", job_prefix("wait"))
    revision = store.put("lock", b"held")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.wait_deleted("lock", revision + 1, timeout=1.0)
