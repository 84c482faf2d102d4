"""What `elasticps run`'s bar leaves on a real terminal when the user presses Ctrl-C: the bar
runs in a child process on a pseudo-terminal whose line discipline echoes ``^C`` and sends
SIGINT, as a shell's terminal does; a terminal emulator (pyte) replays everything written to
it, and the screen must show the bar once."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pyte
import pytest

from tests.helpers import REPO

# The launcher's shape: the bar redrawn until SIGINT, then a message above it, the bar closed,
# and the launcher's last words.
CHILD = """
import signal, sys, threading
from elasticps.launch.progress_view import Field, RichBar, Snapshot
stop = threading.Event()
signal.signal(signal.SIGINT, lambda *_: stop.set())
bar = RichBar(sys.stderr)
fields = (Field("pass 1/1", 1), Field("40%", 0), Field("ETA 1:15", 0), Field("running", 0),
          Field("tasks 12/32", 3), Field("trainers 2", 6), Field("8,468 samples/s", 4))
while not stop.wait(0.05):
    bar.show(Snapshot(fields, 0.4), 0.0)
bar.say("elasticps run: stopping the job")
bar.show(Snapshot(fields, 0.4), 0.0)
bar.close()
print("elasticps run: job stopped; every child has exited", file=sys.stderr)
"""


def screen_after_ctrl_c(columns: int) -> list[str]:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=follower, stdout=follower,
                             stderr=follower, cwd=REPO, start_new_session=True,
                             env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm"},
                             preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(follower)
    written = b""

    def read_until(exit_: bool = False, seconds: float = 20.0) -> None:
        """Read what the child writes: until the bar is up, or (``exit_``) until it exits."""
        nonlocal written
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    return
                if not chunk:
                    return
                written += chunk
                if not exit_ and "━".encode() in written:
                    return  # the bar is up

    try:
        read_until()
        assert "━".encode() in written, written[-500:]
        os.write(leader, b"\x03")  # Ctrl-C: the terminal echoes ^C and sends SIGINT
        read_until(exit_=True)
        assert child.wait(timeout=20) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(leader)
    screen = pyte.Screen(columns, 24)
    pyte.ByteStream(screen).feed(written)
    return [line.rstrip() for line in screen.display if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_ctrl_c_leaves_the_bar_on_screen_once(columns: int) -> None:
    lines = screen_after_ctrl_c(columns)
    bars = [line for line in lines if "━" in line]
    assert len(bars) == 1, lines
    assert lines[-3:] == ["elasticps run: stopping the job", bars[0],
                          "elasticps run: job stopped; every child has exited"], lines
    assert "running" in bars[0]
