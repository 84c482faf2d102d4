"""The CTR demo under the launcher, with one SIGKILL of each role mid-pass and a trainer scaled
away (graceful leave) and back: the job completes and every shard holds every batch of every
pass exactly once (from the shards' final checkpoints and the master's sealing records)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from elasticps.launch.scale import set_desired_trainers
from tests.fault.small_job import (
    assert_exactly_once,
    finished_tasks,
    master_status,
    open_job_store,
    start_small_job,
    stop_job,
)
from tests.helpers import wait_for
from tests.process_tree import leader_pid, live_roles

# Its kills must land before the small job ends: how much of the job is left when each comes
# depends on the machine's speed, so it runs alone (scripts/test.sh).
pytestmark = pytest.mark.exclusive


def test_kill_master_pserver_trainer_and_scale_mid_pass(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    launcher = start_small_job(workdir, lease_ttl=2)
    store = None
    try:
        store, doc = open_job_store(workdir)
        wait_for(lambda: finished_tasks(store) > 0, 180, what="training to start")
        # Scale down to one trainer (graceful leave), then back to two.
        failures = int((master_status(store) or {}).get("failures_total", 0))
        set_desired_trainers(doc["store"], doc["job_name"], 1)
        wait_for(lambda: len(live_roles(launcher.pid)["trainer"]) == 1, 60,
                 what="a trainer to leave")
        leave_failures = int((master_status(store) or {}).get("failures_total", failures))
        set_desired_trainers(doc["store"], doc["job_name"], 2)
        wait_for(lambda: len(live_roles(launcher.pid)["trainer"]) == 2, 60,
                 what="a trainer to join")
        for role in ("master", "pserver", "trainer"):
            mark = finished_tasks(store)
            wait_for(lambda m=mark: finished_tasks(store) > m, 180, what=f"progress before {role}")
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
        assert_exactly_once(store, workdir, 2)
    finally:
        stop_job(launcher, store)
