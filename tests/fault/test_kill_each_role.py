"""The CTR demo under the launcher, with one SIGKILL of each role mid-pass and a trainer scaled
away (graceful leave) and back: the job completes and every shard holds every batch of every
pass exactly once (from the shards' final checkpoints and the master's sealing records)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from elasticps.chaos.accounting import job_accounting
from elasticps.chaos.harness import leader_pid, live_roles
from elasticps.launch.monitor import fetch_status
from elasticps.launch.scale import JOB_FILE, set_desired_trainers
from elasticps.store import Store, open_store
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]


def _status(store: Store) -> dict | None:
    kv = store.get("master/address")
    return None if kv is None else fetch_status(json.loads(kv.value)["http"], timeout=1.0)


def _finished(store: Store) -> int:
    status = _status(store)
    return int(status.get("tasks_finished_total", 0)) if status and "counts" in status else 0


def test_kill_master_pserver_trainer_and_scale_mid_pass(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": "2"}
    env.pop("PADDLE_ROLE", None)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
         "--workdir", str(workdir), str(REPO / "examples" / "ctr" / "train.py"),
         "--rows", "40000", "--rows-per-chunk", "1000", "--passes", "2", "--hidden", "16,16",
         "--id-space", "10007", "--batch-size", "256"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    store = None
    try:
        wait_for(lambda: (workdir / JOB_FILE).exists(), 120, what="the launcher's job.json")
        doc = json.loads((workdir / JOB_FILE).read_text())
        store = open_store(doc["store"], doc["job_name"])
        wait_for(lambda: _finished(store) > 0, 180, what="training to start")
        # Scale down to one trainer (graceful leave), then back to two.
        failures = int((_status(store) or {}).get("failures_total", 0))
        set_desired_trainers(doc["store"], doc["job_name"], 1)
        wait_for(lambda: len(live_roles(launcher.pid)["trainer"]) == 1, 60,
                 what="a trainer to leave")
        leave_failures = int((_status(store) or {}).get("failures_total", failures))
        set_desired_trainers(doc["store"], doc["job_name"], 2)
        wait_for(lambda: len(live_roles(launcher.pid)["trainer"]) == 2, 60,
                 what="a trainer to join")
        for role in ("master", "pserver", "trainer"):
            mark = _finished(store)
            wait_for(lambda m=mark: _finished(store) > m, 180, what=f"progress before {role}")
            pids = live_roles(launcher.pid)[role]
            assert pids, f"no live {role} process under the launcher"
            if role == "master":  # the leader, not the standby
                kv = store.get("master/address")
                pid = leader_pid(None if kv is None else json.loads(kv.value)["node"], pids)
                assert pid is not None, "no leading master among the launcher's children"
                pids = [pid]
            os.kill(pids[0], signal.SIGKILL)
        out, _ = launcher.communicate(timeout=300)
        text = out.decode(errors="replace")
        assert launcher.returncode == 0, text[-3000:]
        summary = json.loads((workdir / "summary.json").read_text())
        assert "pserver 0" in summary["restarts"], summary
        assert any(name.startswith("master") for name in summary["restarts"]), summary
        assert any(name.startswith("trainer") for name in summary["restarts"]), summary
        assert "asked trainer" in text
        assert "started trainer 2" in text
        # The graceful leave handed its task back without counting a failure.
        assert leave_failures == failures
        accounting = job_accounting(store, str(workdir / "checkpoints"), 2)
        assert [p["pass"] for p in accounting["passes"]] == [0, 1]
        assert all(p["complete"] for p in accounting["passes"])
        assert accounting["expected_batches"] > 0
        assert (accounting["duplicates"], accounting["missing"]) == (0, 0), accounting
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGINT)
            launcher.wait(timeout=60)
        if store is not None:
            store.close()
