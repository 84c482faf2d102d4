"""A server's limit on calls at once: PADDLE_MAX_CONCURRENT_RPCS when set, else 1024 for async
and geo pservers (queued calls hold no thread and no request) and 128 for sync pservers (each
admitted call gets a thread and its request is read) and the master. Why 1024: docs/pserver.md's
scale-out figures."""

from __future__ import annotations

from typing import Any

import pytest

from elasticps.config import (
    ASYNC_PSERVER_MAX_CONCURRENT_RPCS,
    DEFAULT_MAX_CONCURRENT_RPCS,
    load_config,
)
from elasticps.pserver import server as pserver_server
from elasticps.pserver.server import GrpcEndpoint


@pytest.mark.parametrize(("role", "mode", "expected"), [
    ("pserver", "async", ASYNC_PSERVER_MAX_CONCURRENT_RPCS),
    ("pserver", "geo", ASYNC_PSERVER_MAX_CONCURRENT_RPCS),
    ("pserver", "sync", DEFAULT_MAX_CONCURRENT_RPCS),
    ("master", "async", DEFAULT_MAX_CONCURRENT_RPCS),
    ("master", "sync", DEFAULT_MAX_CONCURRENT_RPCS)])
def test_an_unset_limit_is_the_roles_default(role: str, mode: str, expected: int) -> None:
    assert load_config({"PADDLE_TRAINING_MODE": mode}).call_limit(role) == expected


@pytest.mark.parametrize("role", ["pserver", "master"])
@pytest.mark.parametrize("mode", ["async", "geo", "sync"])
def test_paddle_max_concurrent_rpcs_wins_for_every_role_and_mode(role: str, mode: str) -> None:
    config = load_config({"PADDLE_TRAINING_MODE": mode, "PADDLE_MAX_CONCURRENT_RPCS": "8"})
    assert config.call_limit(role) == 8


@pytest.mark.parametrize(("mode", "workers", "limit"), [
    ("async", 16, ASYNC_PSERVER_MAX_CONCURRENT_RPCS), ("sync", 128, 128)])
def test_the_pserver_endpoint_builds_its_server_with_that_limit(
    monkeypatch: pytest.MonkeyPatch, mode: str, workers: int, limit: int,
) -> None:
    made: dict[str, Any] = {}

    def record(credentials: Any, **kwargs: Any) -> object:
        made.update(kwargs)
        return object()

    monkeypatch.setattr(pserver_server, "make_server", record)
    monkeypatch.setattr(pserver_server, "bind", lambda server, host, port, credentials: 7000)
    GrpcEndpoint(load_config({"PADDLE_TRAINING_MODE": mode, "PADDLE_JOB_TOKEN": "t",
                              "PADDLE_INSECURE": "1"}))
    assert made["max_concurrent_rpcs"] == limit
    assert made["max_workers"] == workers
