"""A pserver's limit on calls at once: PADDLE_MAX_CONCURRENT_RPCS when set, else 1024 for async
and geo pservers (queued calls hold no thread and no request) and 128 for sync ones (each
admitted call gets a thread and its request is read). Why 1024: docs/pserver.md's scale-out
figures."""

from __future__ import annotations

from typing import Any

import pytest

from elasticps.config import load_config
from elasticps.pserver import server as pserver_server
from elasticps.pserver.server import (
    ASYNC_PSERVER_MAX_CONCURRENT_RPCS,
    GrpcEndpoint,
    call_limit,
)
from elasticps.rpc.server import MAX_CONCURRENT_RPCS


@pytest.mark.parametrize(("mode", "expected"), [
    ("async", ASYNC_PSERVER_MAX_CONCURRENT_RPCS), ("geo", ASYNC_PSERVER_MAX_CONCURRENT_RPCS),
    ("sync", MAX_CONCURRENT_RPCS)])
def test_an_unset_limit_is_the_modes_default(mode: str, expected: int) -> None:
    assert call_limit(load_config({"PADDLE_TRAINING_MODE": mode})) == expected


@pytest.mark.parametrize("mode", ["async", "geo", "sync"])
def test_paddle_max_concurrent_rpcs_wins_in_every_mode(mode: str) -> None:
    config = load_config({"PADDLE_TRAINING_MODE": mode, "PADDLE_MAX_CONCURRENT_RPCS": "8"})
    assert call_limit(config) == 8


@pytest.mark.parametrize(("mode", "workers", "limit"), [
    ("async", 16, ASYNC_PSERVER_MAX_CONCURRENT_RPCS), ("sync", 128, 128)])
def test_the_endpoint_builds_its_server_with_that_limit(
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
