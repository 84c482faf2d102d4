"""The CTR demo under the launcher on a real etcd that is SIGKILLed mid-pass, kept down for
longer than the lease TTL, and restarted on the same ports and data dir: the job completes,
nothing the master acknowledged before the outage is lost, and every shard holds every batch
of every pass exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elasticps.chaos.accounting import job_accounting
from elasticps.launch.monitor import fetch_status
from elasticps.launch.scale import JOB_FILE
from elasticps.store import Store, open_store
from tests.etcd_server import EtcdServer
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
LEASE_TTL = 2


def _status(store: Store) -> dict | None:
    try:
        kv = store.get("master/address")
    except Exception:  # the store is down or restarting: "unknown now"
        return None
    return None if kv is None else fetch_status(json.loads(kv.value)["http"], timeout=1.0)


def _finished(store: Store) -> int:
    status = _status(store)
    return int(status.get("tasks_finished_total", 0)) if status and "counts" in status else 0


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
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": str(LEASE_TTL)}
    env.pop("PADDLE_ROLE", None)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
         "--store", etcd.url, "--workdir", str(workdir),
         str(REPO / "examples" / "ctr" / "train.py"),
         "--rows", "40000", "--rows-per-chunk", "1000", "--passes", "2", "--hidden", "16,16",
         "--id-space", "10007", "--batch-size", "256"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    store = None
    try:
        wait_for(lambda: (workdir / JOB_FILE).exists(), 120, what="the launcher's job.json")
        doc = json.loads((workdir / JOB_FILE).read_text())
        store = open_store(doc["store"], doc["job_name"])
        wait_for(lambda: _finished(store) >= 2, 180, what="training to be under way")
        acknowledged = _finished(store)
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
        back = wait_for(lambda: _finished(store) > acknowledged and _finished(store), 120,
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
        accounting = job_accounting(store, str(workdir / "checkpoints"), 2)
        assert [p["pass"] for p in accounting["passes"]] == [0, 1]
        assert all(p["complete"] for p in accounting["passes"])
        assert accounting["expected_batches"] > 0
        assert (accounting["duplicates"], accounting["missing"]) == (0, 0), accounting
        summary = json.loads((workdir / "summary.json").read_text())
        assert summary["passes"] == 2, summary
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGINT)
            launcher.wait(timeout=60)
        if store is not None:
            store.close()
        etcd.stop()
