"""The fake Kubernetes API server of the cluster tests, for the cluster backend's handle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.cluster.kube_client import KubeClient
from tests.unit.cluster.fake_kube import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube().start()
    yield server
    server.stop()


@pytest.fixture
def client(fake: FakeKube, tmp_path: Path) -> KubeClient:
    return KubeClient.from_kubeconfig(str(fake.kubeconfig(tmp_path / "kubeconfig")))
