"""A busy port is a configuration error, said once, with the port and where it came from.

`elasticps run` with PADDLE_HTTP_PORT taken by another program: the master stops with its
configuration exit code, the launcher does not restart it, and `elasticps run` ends within
10 s with exit code 2 and a message naming the port and the variable. `elasticps ui W --port
P` on a busy port: a one-line error, no traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, run_cli

IDLE = REPO / "tests/security/scripts/idle_trainer.py"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_busy_status_port_ends_the_run_at_once_with_exit_code_2(tmp_path: Path,
                                                                  busy_port: int) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "elasticps", "run", "--workdir", str(tmp_path / "work"),
         "--grace", "5", str(IDLE)],
        env={**os.environ, "PYTHONPATH": str(REPO), "PADDLE_HTTP_PORT": str(busy_port)},
        capture_output=True, text=True, timeout=30, check=False)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    assert took < 10, f"took {took:.1f}s"
    assert "stopped on a configuration error" in done.stderr
    assert f"127.0.0.1:{busy_port} (port {busy_port} from PADDLE_HTTP_PORT" in done.stderr
    assert "restarted" not in done.stderr  # a configuration error is not retried
    assert "Traceback" not in done.stderr


def test_ui_on_a_busy_port_is_a_clear_error(tmp_path: Path, busy_port: int) -> None:
    (tmp_path / "job.json").write_text(json.dumps({"store": f"file://{tmp_path}/store.db",
                                                   "job_name": "done"}))
    (tmp_path / "status.json").write_text(json.dumps({"state": "succeeded"}))
    done = run_cli("ui", str(tmp_path), "--port", str(busy_port))
    assert done.returncode == 1
    assert done.stderr == (
        f"elasticps: error: the status page cannot listen on 127.0.0.1:{busy_port} (port "
        f"{busy_port} from --port): Address already in use; stop what holds the port or "
        "choose another (0 = any free port)\n")
