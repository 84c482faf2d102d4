"""A scoring server on a free loopback port over a model directory of the tiny model; its
follower is stepped by the test (no poll thread) unless the test starts it."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from elasticps.serve.follower import ModelFollower
from elasticps.serve.metrics import ServeMetrics
from elasticps.serve.server import ScoringServer
from tests.unit.serve.tiny_model import build


@dataclass
class Served:
    root: Path
    follower: ModelFollower
    server: ScoringServer

    def request(self, method: str, path: str, body: Any = None, *,
                raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            data = raw if raw is not None else (
                None if body is None else json.dumps(body).encode())
            connection.request(method, path, body=data, headers=headers or {})
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read() or b"{}")
        finally:
            connection.close()

    def score(self, rows: Any) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/score", {"rows": rows})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    root = tmp_path / "model"
    root.mkdir()
    follower = ModelFollower(root, build, poll_s=0.01)
    metrics = ServeMetrics(lambda: follower.current)
    server = ScoringServer(follower, metrics, "127.0.0.1", 0, max_body=4096, max_rows=8)
    server.start()
    try:
        yield Served(root, follower, server)
    finally:
        server.close()
        follower.close()
