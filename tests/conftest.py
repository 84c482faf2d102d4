from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator

import pytest

from tests.etcd_server import EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One real etcd for the session; tests isolate themselves by job name."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed: apt-get install -y etcd-server (.ci/run does this)")
    server = EtcdServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def job_name() -> str:
    """A fresh job name per test so tests sharing a store never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:10]}"
