"""The CTR demo under the launcher on a real etcd that is SIGKILLed mid-pass, kept down for
longer than the lease TTL, and restarted on the same ports and data dir: the job completes,
nothing the master acknowledged before the outage is lost, and every shard holds every batch
of every pass exactly once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.etcd_server import EtcdServer
from tests.fault.small_job import (
    assert_exactly_once,
    finished_tasks,
    open_job_store,
    start_small_job,
    stop_job,
)
from tests.helpers import wait_for

LEASE_TTL = 2


def _logs_mention(logs: Path, text: str) -> bool:
    return any(text in p.read_text(errors="replace") for p in logs.glob("*.log"))


def test_etcd_killed_mid_pass_and_restarted_job_completes_exactly_once(tmp_path: Path) -> None:
    try:
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    etcd.start()
    workdir = tmp_path / "job"
    launcher = start_small_job(workdir, lease_ttl=LEASE_TTL, store_url=etcd.url)
    store = None
    try:
        store, _ = open_job_store(workdir)
        wait_for(lambda: finished_tasks(store) >= 2, 180, what="training to be under way")
        acknowledged = finished_tasks(store)
        etcd.kill()
        killed_at = time.monotonic()
        # Keep etcd down well past every lease TTL (2 s; trainers 5 s): until every role
        # process saw a keepalive of its lease fail (each store call retries for 10 s first).
        wait_for(lambda: all("Keepalive of lease" in p.read_text(errors="replace")
                             for p in (workdir / "logs").glob("*.log")), 60,
                 what="every role to see its lease keepalive fail")
        down_s = time.monotonic() - killed_at
        etcd.start()
        restarted_at = time.monotonic()
        # Nothing the master acknowledged before the outage was lost: the new or same master
        # counts at least as many finished tasks as before.
        back = wait_for(lambda: finished_tasks(store) > acknowledged and finished_tasks(store), 120,
                        what="training to resume after the outage")
        resumed_s = time.monotonic() - restarted_at
        assert back > acknowledged
        out, _ = launcher.communicate(timeout=240)
        text = out.decode(errors="replace")
        assert launcher.returncode == 0, text[-3000:]
        # The outage outlived every lease TTL, yet no lease was lost: etcd restores leases from
        # its data dir with a fresh TTL, the keepalives resume, so no slot was re-claimed and no
        # trainer's tasks were released for its lease.
        assert not _logs_mention(workdir / "logs", "expired before its keepalive reached")
        print(f"etcd down {down_s:.1f}s; training resumed {resumed_s:.1f}s after its restart")
        assert_exactly_once(store, workdir, 2)
        summary = json.loads((workdir / "summary.json").read_text())
        assert summary["passes"] == 2, summary
    finally:
        stop_job(launcher, store)
        etcd.stop()
