"""One etcd member on loopback, run as a child process: ``elasticps chaos``'s store outage takes
it down and brings it back, and the tests run the etcd backend against it.

Started on free ports with its data in a directory; ``kill()`` SIGKILLs it as a crash would and
``start()`` brings it back on the same ports and data, so every lease and key it held returns
with it. With ``tls_dir`` (``ca.crt``, ``server.crt``, ``server.key``) it serves clients over TLS
only and requires a client certificate from that CA, as a job's own etcd does in a cluster.
Health is polled on a plaintext metrics port either way. Needs ``etcd`` on PATH (Debian's
``etcd-server``).
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


def free_port() -> int:
    """A loopback port that was free a moment ago: only for servers that bind from their
    command line (etcd), which cannot report a port they chose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def etcd_binary() -> str:
    binary = shutil.which("etcd")
    if binary is None:
        raise ConfigError("etcd is not on PATH (apt-get install etcd-server)")
    return binary


class LocalEtcd:
    """One etcd member in ``directory`` (its data and ``etcd.log``); use it as a context."""

    def __init__(self, directory: Path, *, name: str = "etcd",
                 tls_dir: Path | None = None) -> None:
        self.binary = etcd_binary()
        self.directory = directory
        self.name = name
        self.tls_dir = tls_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}"

    def start(self, timeout: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        scheme = "http" if self.tls_dir is None else "https"
        client = f"{scheme}://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls = [] if self.tls_dir is None else [
            "--client-cert-auth", "--trusted-ca-file", str(self.tls_dir / "ca.crt"),
            "--cert-file", str(self.tls_dir / "server.crt"),
            "--key-file", str(self.tls_dir / "server.key")]
        with open(self.directory / "etcd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--name", self.name, "--data-dir", str(self.directory / "data"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"{self.name}={peer}", "--heartbeat-interval", "50",
                 "--election-timeout", "500",
                 "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}", *tls],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/health"
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
        raise ConfigError(f"etcd on {self.endpoint} was not healthy after {timeout}s")

    def kill(self) -> None:
        """SIGKILL etcd (as a crash would) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        self.kill()
        self.start()

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
