"""``elasticps run`` with the real master and pserver roles and tiny trainer scripts: a killed
pserver is restarted and reported, a failing trainer fails the job with its error, and SIGINT
stops every child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, pid_alive, wait_for

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_cmd(workdir: Path, script: str, *, trainers: int = 1) -> list[str]:
    return [sys.executable, "-m", "elasticps", "run", "--trainers", str(trainers),
            "--pservers", "1", "--workdir", str(workdir), "--grace", "5",
            str(SCRIPTS / script)]


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def test_killed_pserver_is_restarted_and_reported(tmp_path: Path) -> None:
    proc = subprocess.run(run_cmd(tmp_path, "kill_pserver.py"), env=ENV, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    trainer_log = (tmp_path / "logs" / "trainer-0.log").read_text()
    old_pid = int(trainer_log.split("killing pserver 0 (pid ")[1].split(")")[0])
    new_pid = int(trainer_log.split("back as pid ")[1].split()[0])
    assert f"pserver 0 (pid {old_pid}) exited with signal SIGKILL; restarted it as pid {new_pid}" \
        in proc.stderr
    assert "restart 1 of pserver 0" in (tmp_path / "logs" / "pserver-0.log").read_text()


def test_failing_trainer_fails_the_job_with_its_error(tmp_path: Path) -> None:
    proc = subprocess.run(run_cmd(tmp_path, "fail.py"), env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1
    assert "failed: trainer 0 failed with exit code 1" in proc.stderr
    assert "RuntimeError: bad input at row 7" in proc.stderr  # the tail of its log
    assert not (tmp_path / "summary.json").exists()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def test_sigint_stops_every_child(tmp_path: Path) -> None:
    launcher = subprocess.Popen(run_cmd(tmp_path, "block.py", trainers=2), env=ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        children = wait_for(lambda: len(children_of(launcher.pid)) == 5
                            and children_of(launcher.pid), timeout=60, what="5 role processes")
        wait_for(lambda: all("trainer is up" in (tmp_path / "logs" / f"trainer-{i}.log")
                             .read_text() for i in range(2)), timeout=60, what="trainers up")
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in children]
        roles = sorted(next(part.decode() for part in cmd if part in (b"master", b"pserver",
                                                                      b"trainer"))
                       for cmd in cmdlines)
        assert roles == ["master", "master", "pserver", "trainer", "trainer"]  # + a standby
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 130, err
        assert "stopped (received SIGINT); every child has exited" in err
        assert all(not pid_alive(pid) for pid in children)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_standby_master_takes_over_a_killed_leader_and_a_new_standby_starts(
        tmp_path: Path) -> None:
    import json
    import time

    from elasticps.launch.scale import JOB_FILE
    from elasticps.store import open_store
    from tests.process_tree import leader_pid, live_roles

    env = {**ENV, "PADDLE_LEASE_TTL": "2"}
    launcher = subprocess.Popen(run_cmd(tmp_path, "block.py"), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = None
    try:
        wait_for(lambda: (tmp_path / JOB_FILE).exists(), 60, what="job.json")
        doc = json.loads((tmp_path / JOB_FILE).read_text())
        store = open_store(doc["store"], doc["job_name"])

        def leader() -> tuple[str, int] | None:
            kv = store.get("master/address") if store is not None else None
            if kv is None:
                return None
            node = json.loads(kv.value)["node"]
            pid = leader_pid(node, live_roles(launcher.pid)["master"])
            return None if pid is None else (node, pid)

        node, pid = wait_for(leader, 60, what="a master leader")
        masters = wait_for(lambda: len(ms := live_roles(launcher.pid)["master"]) == 2 and ms,
                           60, what="the standby master process")
        standby = next(p for p in masters if p != pid)
        logs = list((tmp_path / "logs").glob("master*.log"))
        wait_for(lambda: any(f"-{standby} of job {doc['job_name']} campaigns" in p.read_text()
                             for p in logs), 60, what="the standby to campaign")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        _, new_pid = wait_for(lambda: (lead := leader()) and lead[0] != node and lead,
                              60, what="a new leader")
        takeover = time.monotonic() - killed_at
        # A master that was waiting in the election took over once the dead leader's lease
        # (TTL 2 s) expired: the standby, or the restarted process if it reached the election
        # before the lease expired (both then race for the lock on its DELETE).
        assert new_pid != pid
        assert new_pid == standby or new_pid in live_roles(launcher.pid)["master"]
        assert takeover < 12, takeover
        # The launcher restarted the killed one, which is now the new standby.
        wait_for(lambda: len(ms := live_roles(launcher.pid)["master"]) == 2
                 and pid not in ms, 60, what="a new standby master process")
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
        assert f"(pid {pid}) exited with signal SIGKILL; restarted it" in err
    finally:
        if store is not None:
            store.close()
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
