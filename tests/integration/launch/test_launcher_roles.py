"""``elasticps run`` with the real master and pserver roles and tiny trainer scripts: a killed
pserver is restarted and reported, a failing trainer fails the job with its error, and SIGINT
stops every child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import pid_alive, wait_for

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
        children = wait_for(lambda: len(children_of(launcher.pid)) == 4
                            and children_of(launcher.pid), timeout=60, what="4 role processes")
        wait_for(lambda: all("trainer is up" in (tmp_path / "logs" / f"trainer-{i}.log")
                             .read_text() for i in range(2)), timeout=60, what="trainers up")
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in children]
        roles = sorted(next(part.decode() for part in cmd if part in (b"master", b"pserver",
                                                                      b"trainer"))
                       for cmd in cmdlines)
        assert roles == ["master", "pserver", "trainer", "trainer"]
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 130, err
        assert "stopped (received SIGINT); every child has exited" in err
        assert all(not pid_alive(pid) for pid in children)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
