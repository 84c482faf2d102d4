"""A real etcd for tests: started on free loopback ports, polled for health, stopped by PID.

Modelled on torch's ``torch/distributed/elastic/rendezvous/etcd_server.py``.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A port that was free a moment ago. Only for servers we do not write (etcd)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EtcdServer:
    """One etcd member on loopback. ``restart()`` keeps the data dir and the ports.

    With ``tls_dir`` (a directory holding ``ca.crt``, ``server.crt``, ``server.key``) it serves
    clients over TLS only and requires a client certificate from that CA
    (``--client-cert-auth``), as a job's own etcd does in a cluster; health is then polled on a
    plaintext metrics port.
    """

    def __init__(self, data_dir: str | None = None, tls_dir: Path | None = None) -> None:
        self.binary = shutil.which("etcd")
        if self.binary is None:
            raise RuntimeError("etcd is not installed (apt-get install -y etcd-server)")
        self._own_dir = data_dir is None
        self.base_dir = Path(data_dir or tempfile.mkdtemp(prefix="elasticps-etcd-"))
        self.client_port = free_port()
        self.peer_port = free_port()
        self.metrics_port = free_port()
        self.tls_dir = tls_dir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}"

    def start(self, timeout: float = 30.0) -> None:
        scheme = "http" if self.tls_dir is None else "https"
        client = f"{scheme}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls = [] if self.tls_dir is None else [
            "--client-cert-auth", "--trusted-ca-file", str(self.tls_dir / "ca.crt"),
            "--cert-file", str(self.tls_dir / "server.crt"),
            "--key-file", str(self.tls_dir / "server.key")]
        log = open(self.base_dir / "etcd.log", "ab")  # noqa: SIM115 - lives as long as etcd
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "--name", "test",
                "--data-dir", str(self.base_dir / "data"),
                "--listen-client-urls", client,
                "--advertise-client-urls", client,
                "--listen-peer-urls", peer,
                "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"test={peer}",
                "--heartbeat-interval", "50",
                "--election-timeout", "500",
                "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
                *tls,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.base_dir}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if b'"health":"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"etcd on {self.endpoint} not healthy after {timeout}s")

    def kill(self) -> None:
        """SIGKILL etcd, as a crash would, and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

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
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
