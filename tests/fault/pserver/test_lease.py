"""A pserver whose store lease expired while it lived (the process paused past the TTL, as a long
GC or VM stall would; SIGSTOP here) reclaims its slot under a new lease, and a clean exit after
that frees the slot at once, not a TTL later."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from elasticps.store import KeyValue, open_store
from elasticps.store.keys import PServerSlot, pserver_slot
from tests.etcd_server import EtcdServer
from tests.helpers import wait_for
from tests.integration.pserver.harness import PServers

SLOT = pserver_slot(0)


def test_a_pserver_that_reclaimed_its_slot_frees_it_at_once_on_sigterm(
        tmp_path: Path, job_name: str, etcd_server: EtcdServer) -> None:
    # etcd expires the paused process's lease on its own clock; the pserver's lease TTL is 2 s.
    store = open_store(etcd_server.url, job_name)
    servers = PServers(tmp_path, etcd_server.url, job_name, num=1)
    try:
        proc = servers.start()
        servers.wait_slots(store, {proc.pid})
        first = store.get(SLOT)
        assert first is not None
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: store.get(SLOT) is None, 30, "the paused pserver's lease to expire")
        finally:
            os.kill(proc.pid, signal.SIGCONT)

        def reclaimed() -> KeyValue | None:
            kv = store.get(SLOT)
            return kv if kv is not None and kv.lease != first.lease else None

        second = wait_for(reclaimed, 30, "the pserver to reclaim its slot under a new lease")
        assert PServerSlot.decode(second.value, SLOT).pid == proc.pid
        servers.kill(proc, signal.SIGTERM)
        assert proc.returncode == 0, servers.logs()
        assert store.get(SLOT) is None, "a clean exit must free the slot at once"
        assert "reclaimed slot 0" in servers.logs()
    finally:
        servers.stop_all()
        store.close()
