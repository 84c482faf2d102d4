"""A person's verbs on a real local job (`elasticps run`: two masters, two pservers, a trainer,
JSON logs): `elasticps list` shows it running with its status page; `elasticps logs pserver-K`
is the log of the process that serves shard K and `logs master` that of the leader (after a
failover onto the standby, whatever file it logs to); `logs --all` merges every process's
log, the trainer script's print included as a JSON record; `elasticps stop` ends it gracefully
and says so in its exit code; `list` then shows how it ended. About 25 s."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elasticps.store import open_store
from elasticps.store.keys import (
    MASTER_CANDIDATE_PREFIX,
    PServerSlot,
    pserver_slot,
    read_master_address,
)
from tests.helpers import REPO, kill_quietly, pid_alive, run_cli, wait_for

BLOCK = REPO / "tests/integration/launch/scripts/block.py"
JOB = "verbs-test"


def records(text: str) -> list[dict[str, Any]]:
    """The JSON records among a log's lines (a restarted process's log also holds the
    launcher's `===== restart N of ... =====` line, after a blank one)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_logs_stop_and_list_of_a_running_local_job(tmp_path: Path) -> None:
    workdir, out = tmp_path / "job", tmp_path / "launcher.out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
           "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": "2",
           "XDG_STATE_HOME": str(tmp_path / "state")}
    with out.open("wb") as sink:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "2",
             "--standby-masters", "1", "--workdir", str(workdir), "--job-name", JOB,
             "--grace", "5", "--log-format", "json", str(BLOCK)],
            env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    store = None
    try:
        url = wait_for(lambda: re.search(r"status: (http://\S+/)", out.read_text()), 120,
                       what="the status URL").group(1)
        store = open_store(f"file://{workdir}/store.db", JOB)
        wait_for(lambda: all(store.get(pserver_slot(i)) for i in (0, 1))
                 and "trainer is up" in (workdir / "logs/trainer-0.log").read_text(), 120,
                 what="both shards served and the trainer up")

        listed = run_cli("list", "--json", env=env)
        assert [(r["name"], r["state"], r["workdir"], r["status_url"])
                for r in json.loads(listed.stdout)] == [(JOB, "running", str(workdir), url)]

        def logs(*args: str) -> list[dict[str, Any]] | None:
            done = run_cli("logs", "--workdir", str(workdir), *args, env=env)
            return records(done.stdout) if done.returncode == 0 else None

        for shard in (0, 1):
            kv = store.get(pserver_slot(shard))
            assert kv is not None
            holder = PServerSlot.decode(kv.value, kv.key)
            lines = wait_for(lambda s=shard: logs(f"pserver-{s}"), 30,
                             what=f"the launcher's record of shard {shard}")
            assert f"pserver {shard} of 2 (job {JOB}) claimed its slot at {holder.address}." \
                in [r["message"] for r in lines]
            assert f"pserver-{1 - shard}" not in {r["node"] for r in lines}  # the other's

        # The second master process started (logging to master-1.log) leads: if the first
        # won, it is frozen until its lease runs out and the other takes over (a kill would
        # let its restart campaign too), then let go: it finds itself deposed and restarts.
        # The standby starts once the job trains or a lease TTL in (launch/standby.py): this
        # trainer never trains, so the test waits for both masters to be in the election.
        wait_for(lambda: len(store.get_prefix(MASTER_CANDIDATE_PREFIX)) == 2, 60,
                 what="the standby in the election")
        leader = wait_for(lambda: read_master_address(store), 30, what="a leader")
        if leader.node not in (workdir / "logs/master-1.log").read_text():
            os.kill(leader.pid, signal.SIGSTOP)
            old = leader.pid
            try:
                leader = wait_for(lambda: (lambda a: a if a is not None and a.pid != old
                                           else None)(read_master_address(store)), 60,
                                  what="the standby's lead")
            finally:
                os.kill(old, signal.SIGCONT)
        assert leader.node in (workdir / "logs/master-1.log").read_text()
        won = f"Master {leader.node} of job {JOB} is the leader; loading the state."
        shown = wait_for(lambda: (lambda r: r if r and won in [x["message"] for x in r]
                                  else None)(logs("master")), 30, what="the leader's log")
        assert {r["node"] for r in shown if r["role"] == "master"} >= {leader.node}

        every = run_cli("logs", str(workdir), "--all", env=env)
        prefixes = {line.split(" | ")[0].strip() for line in every.stdout.splitlines()}
        assert {"master-0", "master-1", "pserver-0", "pserver-1", "trainer-0"} <= prefixes
        said = records("\n".join(line.split(" | ", 1)[1] for line in every.stdout.splitlines()
                                  if line.startswith("trainer-0")))
        assert {"logger": "stdout", "message": "trainer is up"}.items() <= next(
            r for r in said if r["logger"] == "stdout").items()
        masters = run_cli("logs", str(workdir), "master", "--all", env=env)
        assert {line.split(" | ")[0].strip() for line in masters.stdout.splitlines()} == {
            "master-0", "master-1"}

        pids = [int(pid) for pid in json.loads(
            (workdir / "processes.json").read_text())["processes"]]
        stopped = run_cli("stop", str(workdir), env=env)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"job {JOB} stopped (interrupted); every process of the job has exited" \
            in stopped.stdout
        assert launcher.wait(timeout=5) == 130  # it had exited: the stop waited for it
        assert not [pid for pid in pids if pid_alive(pid)]
        after = json.loads(run_cli("list", "--json", env=env).stdout)
        assert [(r["name"], r["state"], r["status_url"]) for r in after] == [
            (JOB, "interrupted", None)]
        again = run_cli("stop", "--workdir", str(workdir), env=env)
        assert again.returncode == 3
        assert "is not running (interrupted); nothing to stop" in again.stdout
    finally:
        if store is not None:
            store.close()
        if launcher.poll() is None:
            kill_quietly(launcher.pid, signal.SIGTERM)
            launcher.wait(timeout=60)
