"""The etcd member a chaos run's store outage takes down: one etcd on loopback, started on free
ports with its data in a directory of the run, SIGKILLed (as a crash would) and restarted on the
same ports and data, so every lease and key it held comes back with it. Needs ``etcd`` on PATH.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from elasticps.errors import ConfigError

POLL_S = 0.05


def etcd_binary() -> str:
    binary = shutil.which("etcd")
    if binary is None:
        raise ConfigError("a store outage needs etcd on PATH (e.g. apt-get install etcd-server); "
                          "or pass --outage 0")
    return binary


def _free_port() -> int:
    # etcd binds its own ports from its command line, so the port is picked here, then freed.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalEtcd:
    """One etcd member in ``directory`` (its data and ``etcd.log``); use it as a context."""

    def __init__(self, directory: Path) -> None:
        self.binary = etcd_binary()
        self.directory = directory
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with open(self.directory / "etcd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--name", "chaos", "--data-dir", str(self.directory / "data"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"chaos={peer}", "--heartbeat-interval", "50",
                 "--election-timeout", "500"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.client_port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ConfigError(f"etcd exited with {self.proc.returncode}; see "
                                  f"{self.directory / 'etcd.log'}")
            try:
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if b'"health":"true"' in reply.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(POLL_S)  # a readiness poll
        raise ConfigError(f"etcd on port {self.client_port} was not healthy after {timeout}s")

    def kill(self) -> None:
        """SIGKILL etcd (the outage starts) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> LocalEtcd:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
