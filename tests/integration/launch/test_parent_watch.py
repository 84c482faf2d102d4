"""A process tied to its parent (``elasticps/launch/parent_watch.py``) gets exactly one SIGTERM
when the parent is SIGKILLed — by the kernel's parent-death signal (relayed; the watcher thread
then polls too slowly to be the one) and by the portable watcher thread alone, even from a
parent with many threads — and exits at once when its parent was gone before it could tie
itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, kill_quietly, pid_alive, wait_for

ENV = {**os.environ, "PYTHONPATH": str(REPO)}

# The child ties itself to its parent and counts SIGTERMs. After the first it keeps listening
# for a second (a duplicate would come from the same parent exit, within microseconds), then
# writes the count and exits.
CHILD = """
import os, signal, sys, threading
from elasticps.launch.parent_watch import exit_with_parent
terms = []
first = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: (terms.append(1), first.set()))
tied = exit_with_parent(os.getppid(), use_prctl={use_prctl}, poll_s={poll_s})
print("tied" if tied else "orphan", flush=True)
while not first.wait(0.05):
    pass
threading.Event().wait(1.0)  # the window in which a duplicate would arrive
print(f"sigterm x{{len(terms)}}", flush=True)
"""
# The parent runs idle threads (as the launcher does), starts the child, reports its pid, and
# waits to be killed.
PARENT = """
import signal, subprocess, sys, threading
for _ in range(8):
    threading.Thread(target=threading.Event().wait, daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=open(sys.argv[2], "w"))
print(child.pid, flush=True)
signal.pause()
"""


@pytest.mark.parametrize(("use_prctl", "poll_s"), [(True, 3600.0), (False, 0.05)],
                         ids=["prctl", "watcher-thread"])
def test_a_tied_child_gets_one_sigterm_when_its_parent_is_sigkilled(
        tmp_path: Path, use_prctl: bool, poll_s: float) -> None:
    out = tmp_path / "child.out"
    child_code = CHILD.format(use_prctl=use_prctl, poll_s=poll_s)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, child_code, str(out)], env=ENV,
        stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        wait_for(lambda: out.exists() and out.read_text() == "tied\n", 30, "the child to tie")
        parent.kill()
        parent.wait(timeout=10)
        try:
            wait_for(lambda: not pid_alive(child), 30, "the child to stop after its parent")
        except AssertionError as exc:  # say where it stands: its signals, its parent
            raise AssertionError(f"{exc}; child.out={out.read_text()!r}; "
                                 f"{_signal_state(child)}") from None
        assert out.read_text() == "tied\nsigterm x1\n"
    finally:
        if child:
            kill_quietly(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _signal_state(pid: int) -> str:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"no /proc/{pid}/status ({exc})"
    return "; ".join(line for line in lines
                     if line.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk",
                                               "SigIgn", "SigCgt"))


def test_a_role_whose_launcher_is_already_gone_exits_at_once(tmp_path: Path) -> None:
    # A pid that is certainly not our parent's: a finished process of ours.
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    done = subprocess.run(
        [sys.executable, "-m", "elasticps", f"--exit-with-parent={finished.pid}", "env"],
        env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"the launcher (pid {finished.pid}) that started this env has already exited" \
        in done.stderr
    assert done.stdout == ""  # it never ran the command
