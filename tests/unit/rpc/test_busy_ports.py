"""A port that is taken is a configuration error naming the address, the cause and the variable
(or flag) the port came from: the gRPC port of the master and the pservers (PADDLE_PORT), the
health probe port (PADDLE_HEALTH_PORT) and the data receiver's --port. A pserver process says so
in one line, with no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc_health.v1 import health

from elasticps.data.receive import Receiver, make_server
from elasticps.errors import ConfigError
from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.health import serve_health
from elasticps.rpc.server import bind
from elasticps.rpc.server import make_server as make_grpc_server
from tests.helpers import REPO


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_the_grpc_port(busy_port: int) -> None:
    server = make_grpc_server(JobCredentials("demo", "t" * 32))
    with pytest.raises(ConfigError) as caught:
        bind(server, "127.0.0.1", busy_port, JobCredentials("demo", "t" * 32))
    assert str(caught.value) == (
        f"the gRPC server cannot listen on 127.0.0.1:{busy_port} (port {busy_port} from "
        "PADDLE_PORT): Address already in use; stop what holds the port or choose another "
        "(0 = any free port)")
    with pytest.raises(ConfigError, match=r"from PADDLE_PORT or --port\): Address already"):
        bind(server, "127.0.0.1", busy_port, JobCredentials("demo", "t" * 32),
             setting="PADDLE_PORT or --port")
    server.stop(None)


def test_an_address_that_is_not_this_machines() -> None:
    server = make_grpc_server(JobCredentials("demo", "t" * 32))
    with pytest.raises(ConfigError, match=r"cannot listen on 192\.0\.2\.1:7164 \(port 7164 "
                                          r"from PADDLE_PORT\): Cannot assign requested"):
        bind(server, "192.0.2.1", 7164, JobCredentials("demo", "t" * 32))
    server.stop(None)


def test_the_health_port(busy_port: int) -> None:
    with pytest.raises(ConfigError, match=rf"the health probe server cannot listen on "
                                          rf"127\.0\.0\.1:{busy_port} \(port {busy_port} from "
                                          r"PADDLE_HEALTH_PORT\): Address already in use"):
        serve_health(health.HealthServicer(), "127.0.0.1", busy_port)


def test_the_data_receivers_port(busy_port: int, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"the data receiver cannot listen on "
                                          rf"127\.0\.0\.1:{busy_port} \(port {busy_port} from "
                                          r"--port\): Address already in use"):
        make_server(Receiver(tmp_path, "t" * 32), "127.0.0.1", busy_port)


@pytest.mark.slow
def test_a_pserver_process_says_it_in_one_line(busy_port: int, tmp_path: Path) -> None:
    """About 2 s: a real `elasticps pserver`, which opens its store before it binds."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
           "PYTHONPATH": str(REPO), "PADDLE_STORE": f"file://{tmp_path}/store.db",
           "PADDLE_JOB_NAME": "busy", "PADDLE_JOB_TOKEN": "t" * 32, "PADDLE_INSECURE": "true",
           "PADDLE_HOST": "127.0.0.1", "PADDLE_PORT": str(busy_port)}
    done = subprocess.run([sys.executable, "-m", "elasticps", "pserver"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert (f"elasticps: error: the gRPC server cannot listen on 127.0.0.1:{busy_port} (port "
            f"{busy_port} from PADDLE_PORT): Address already in use") in done.stderr
    assert "Traceback" not in done.stderr

