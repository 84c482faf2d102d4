from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.etcd_server import EtcdServer

FAST_TIER = tuple(Path(__file__).parent / tier for tier in ("unit", "contract"))

# Every `elasticps run` registers its job for `elasticps list` under $XDG_STATE_HOME: the tests'
# jobs go to a directory of this session's own, never to the developer's ~/.local/state.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="elasticps-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier (``-m fast``): unit and contract tests not marked slow."""
    for item in items:
        in_tier = any(item.path.is_relative_to(tier) for tier in FAST_TIER)
        if in_tier and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


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
