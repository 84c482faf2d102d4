"""The launcher's supervisor: the pure decision function, and the state machine stepped over
real (tiny) child processes."""

from __future__ import annotations

import io
import signal
import sys
from pathlib import Path

import pytest

from elasticps.errors import CONFIG_EXIT_CODE
from elasticps.launch.process import RoleSpec
from elasticps.launch.supervisor import JobState, Observation, Supervisor, decide
from tests.helpers import pid_alive, wait_for


def obs(name: str, role: str, code: int | None, *, restarts: int = 0, due: bool = True,
        restartable: bool | None = None) -> Observation:
    return Observation(name, role, role != "trainer" if restartable is None else restartable,
                       code, restarts, due)


def test_decide_restarts_a_crashed_pserver_when_its_backoff_passed() -> None:
    d = decide([obs("master", "master", None), obs("pserver 0", "pserver", -9),
                obs("trainer 0", "trainer", None)], max_restarts=3)
    assert d.restart == ["pserver 0"]
    assert d.fail is None
    assert not d.succeed
    d = decide([obs("pserver 0", "pserver", -9, due=False), obs("trainer 0", "trainer", None)], 3)
    assert d.restart == []


def test_decide_fails_on_a_failed_trainer_or_exhausted_restarts() -> None:
    d = decide([obs("pserver 0", "pserver", None), obs("trainer 1", "trainer", 2)], 3)
    assert d.fail == "trainer 1 failed with exit code 2"
    assert d.failed == "trainer 1"
    d = decide([obs("pserver 0", "pserver", 1, restarts=3), obs("trainer 0", "trainer", None)], 3)
    assert d.failed == "pserver 0"
    assert "restarted 3 times" in (d.fail or "")


def test_decide_restarts_a_killed_trainer_but_fails_on_a_script_error() -> None:
    killed = decide([obs("master", "master", None),
                     obs("trainer 0", "trainer", -9, restartable=True)], 3)
    assert killed.restart == ["trainer 0"]
    assert killed.fail is None
    errored = decide([obs("master", "master", None),
                      obs("trainer 0", "trainer", 1, restartable=True)], 3)
    assert errored.restart == []
    assert errored.fail == "trainer 0 failed with exit code 1"


def test_decide_fails_at_once_on_a_configuration_error_of_any_role() -> None:
    """A master that exits 78 (a busy PADDLE_HTTP_PORT, say) would exit 78 again: the job
    fails now, its first restart not spent, instead of restarting it max_restarts times."""
    for role in ("master", "pserver", "trainer"):
        d = decide([obs("one", role, CONFIG_EXIT_CODE), obs("trainer 9", "trainer", None)], 3)
        assert d.restart == []
        assert d.fail == ("one stopped on a configuration error (exit code 78); a restart "
                          "would repeat it")
        assert (d.failed, d.config_error) == ("one", True)
    crashed = decide([obs("master", "master", 1), obs("trainer 0", "trainer", None)], 3)
    assert (crashed.restart, crashed.config_error) == (["master"], False)


def test_decide_succeeds_when_every_trainer_exited_zero() -> None:
    d = decide([obs("master", "master", None), obs("trainer 0", "trainer", 0),
                obs("trainer 1", "trainer", None)], 3)
    assert not d.succeed
    d = decide([obs("master", "master", None), obs("trainer 0", "trainer", 0),
                obs("trainer 1", "trainer", 0)], 3)
    assert d.succeed


def py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


# A "pserver" that crashes on its first run and serves (blocks) on its second.
CRASH_ONCE = """
import os, signal, sys
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").close()
    print("crashing on purpose", flush=True)
    os._exit(3)
open(marker + ".restarted", "w").close()
signal.pause()
"""
# A "trainer" that finishes once the pserver came back.
WAIT_FOR_FILE = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print("trained", flush=True)
"""
BLOCK = "import signal; signal.pause()"
IGNORE_TERM = ("import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('ready', flush=True); signal.pause()")


def run_until_final(sup: Supervisor, timeout: float = 30.0) -> JobState:
    return wait_for(lambda: sup.step() if sup.step().final else None, timeout, what="final state")


def test_crashed_pserver_is_restarted_and_reported_then_job_succeeds(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    report = io.StringIO()
    specs = [
        RoleSpec("master", 0, py(BLOCK), log_path=tmp_path / "master.log", restart=True),
        RoleSpec("pserver", 0, (*py(CRASH_ONCE), str(marker)),
                 log_path=tmp_path / "pserver-0.log", restart=True),
        RoleSpec("trainer", 0, (*py(WAIT_FOR_FILE), str(marker) + ".restarted"),
                 log_path=tmp_path / "trainer-0.log"),
    ]
    sup = Supervisor(specs, grace=5.0, report=report)
    sup.start()
    first_pserver_pid = sup.procs["pserver 0"].pid
    assert run_until_final(sup) is JobState.SUCCEEDED
    assert sup.procs["pserver 0"].restarts == 1
    assert sup.procs["pserver 0"].pid != first_pserver_pid
    assert f"pserver 0 (pid {first_pserver_pid}) exited with exit code 3" in report.getvalue()
    assert "crashing on purpose" in (tmp_path / "pserver-0.log").read_text()
    assert "restart 1 of pserver 0" in (tmp_path / "pserver-0.log").read_text()
    assert all(not pid_alive(pid) for pid in sup.pids().values())


def test_failing_trainer_fails_the_job_and_stops_everyone(tmp_path: Path) -> None:
    specs = [
        RoleSpec("master", 0, py(BLOCK), restart=True),
        RoleSpec("trainer", 0, py("import sys; print('boom: bad batch'); sys.exit(2)"),
                 log_path=tmp_path / "trainer-0.log"),
        RoleSpec("trainer", 1, py(BLOCK)),
    ]
    sup = Supervisor(specs, grace=5.0)
    sup.start()
    pids = sup.pids()
    assert run_until_final(sup) is JobState.FAILED
    assert sup.failure == "trainer 0 failed with exit code 2"
    assert sup.failed_proc is sup.procs["trainer 0"]
    assert "boom: bad batch" in sup.failed_proc.log_tail()
    assert all(not pid_alive(pid) for pid in pids.values())


def test_stop_escalates_to_sigkill_for_children_that_ignore_sigterm(tmp_path: Path) -> None:
    now = [0.0]
    log = tmp_path / "stubborn.log"
    specs = [RoleSpec("pserver", 0, py(IGNORE_TERM), log_path=log, restart=True),
             RoleSpec("trainer", 0, py(BLOCK))]
    sup = Supervisor(specs, grace=3.0, clock=lambda: now[0])
    sup.start()
    wait_for(lambda: log.exists() and "ready" in log.read_text(), what="SIGTERM ignored")
    sup.stop("test")
    trainer_pid, pserver_pid = sup.procs["trainer 0"].pid, sup.procs["pserver 0"].pid
    assert trainer_pid is not None
    assert pserver_pid is not None
    wait_for(lambda: sup.procs["trainer 0"].poll() is not None, what="trainer exit")
    sup.step()
    assert sup.state is JobState.STOPPING
    assert pid_alive(pserver_pid)
    now[0] = 3.5  # past the grace period
    assert run_until_final(sup) is JobState.INTERRUPTED
    assert sup.procs["pserver 0"].poll() == -signal.SIGKILL


@pytest.mark.parametrize(("restarts", "expected"), [(0, 0.0), (1, 0.5), (3, 2.0), (10, 10.0)])
def test_restart_backoff_grows_and_is_capped(restarts: int, expected: float) -> None:
    from elasticps.launch.supervisor import restart_backoff

    assert restart_backoff(restarts) == expected


def test_restart_backoff_grows_with_quick_exits_and_resets_after_a_stable_run() -> None:
    now = [0.0]
    spec = RoleSpec("master", 0, py("import sys; sys.exit(3)"), restart=True)
    sup = Supervisor([spec], clock=lambda: now[0], max_restarts=100, stable_after=10.0)
    sup.start()
    proc = sup.procs["master"]

    def exited_then_step() -> None:
        wait_for(lambda: proc.poll() is not None, what="the child to exit")
        sup.step()

    now[0] = 20.0  # it ran 20 s (stable) before this exit: restarted at once
    exited_then_step()
    assert proc.restarts == 1
    exited_then_step()  # a quick exit (0 s): the next restart waits 0.5 s
    assert proc.restarts == 1
    now[0] = 20.6
    sup.step()
    assert proc.restarts == 2
    exited_then_step()  # the second quick exit in a row: 1 s
    now[0] = 21.0
    sup.step()
    assert proc.restarts == 2
    now[0] = 21.7
    sup.step()
    assert proc.restarts == 3
    wait_for(lambda: proc.poll() is not None, what="the child to exit")
    now[0] = 40.0  # this run lasted 18 s: the backoff is back to none
    sup.step()
    assert proc.restarts == 4
    sup.stop("test")
    run_until_final(sup)
