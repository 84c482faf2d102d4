"""A small CTR job under the launcher, as the fault tests drive it, and what they read of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from elasticps.chaos.accounting import job_accounting
from elasticps.launch.scale import JOB_FILE
from elasticps.master.status_read import fetch_status
from elasticps.store import Store, open_store
from tests.helpers import REPO, wait_for

# 2 passes over 40 chunks of 1,000 rows with a small tower: long enough to kill things mid-pass,
# short enough for the suite.
SMALL_CTR_ARGS = ("--rows", "40000", "--rows-per-chunk", "1000", "--passes", "2",
                  "--hidden", "16,16", "--id-space", "10007", "--batch-size", "256")


def start_small_job(workdir: Path, *, lease_ttl: int, store_url: str | None = None
                    ) -> subprocess.Popen[bytes]:
    """`elasticps run` with 2 trainers and 2 pservers on the small CTR job, in its own session."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": str(lease_ttl)}
    env.pop("PADDLE_ROLE", None)
    store = ["--store", store_url] if store_url else []
    return subprocess.Popen(
        [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2", *store,
         "--workdir", str(workdir), str(REPO / "examples" / "ctr" / "train.py"),
         *SMALL_CTR_ARGS],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def open_job_store(workdir: Path) -> tuple[Store, dict[str, Any]]:
    """The launched job's store, once the launcher has written its job.json."""
    wait_for(lambda: (workdir / JOB_FILE).exists(), 120, what="the launcher's job.json")
    doc = json.loads((workdir / JOB_FILE).read_text())
    return open_store(doc["store"], doc["job_name"]), doc


def master_status(store: Store) -> dict[str, Any] | None:
    """The master's /api/status, or None while there is no reachable master (or store)."""
    try:
        kv = store.get("master/address")
    except Exception:  # the store is down or restarting: "unknown now"
        return None
    return None if kv is None else fetch_status(json.loads(kv.value)["http"], timeout=1.0)


def finished_tasks(store: Store) -> int:
    status = master_status(store)
    return int(status.get("tasks_finished_total", 0)) if status and "counts" in status else 0


def assert_exactly_once(store: Store, workdir: Path, passes: int) -> None:
    """Every shard holds every batch of every pass exactly once."""
    accounting = job_accounting(store, str(workdir / "checkpoints"), passes)
    assert [p["pass"] for p in accounting["passes"]] == list(range(passes))
    assert all(p["complete"] for p in accounting["passes"])
    assert accounting["expected_batches"] > 0
    assert (accounting["duplicates"], accounting["missing"]) == (0, 0), accounting


def stop_job(launcher: subprocess.Popen[bytes], store: Store | None) -> None:
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGINT)
        launcher.wait(timeout=60)
    if store is not None:
        store.close()
