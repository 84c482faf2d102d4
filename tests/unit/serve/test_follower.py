"""The follower on a real model directory with a controlled clock: a version that fails to load
is reported once (not at every poll) and tried again after RETRY_FAILED_S, so a passing I/O
error does not pin the server to an old version."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from elasticps.serve.follower import RETRY_FAILED_S, ModelFollower
from elasticps.serve.metrics import ServeMetrics
from tests.unit.serve.tiny_model import build, publish_version


def test_a_failed_version_is_reported_once_and_tried_again_later(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    follower = ModelFollower(tmp_path, build, clock=lambda: now[0])
    follower.metrics = ServeMetrics(lambda: follower.current)
    publish_version(tmp_path, "full")
    assert follower.step()
    record = publish_version(tmp_path)
    weights = tmp_path / record.path / "model.safetensors"
    shutil.copy(weights, tmp_path / "saved")
    weights.write_bytes(b"not yet")  # as if the disk failed a read
    with caplog.at_level(logging.WARNING, logger="elasticps.serve.follower"):
        for _ in range(5):
            assert not follower.step()
            now[0] += 1.0
    assert len([r for r in caplog.records if "Cannot load version 2" in r.message]) == 1
    assert follower.metrics.load_failures._value.get() == 1
    shutil.copy(tmp_path / "saved", weights)  # the error passed
    assert not follower.step()  # within RETRY_FAILED_S: not tried yet
    now[0] += RETRY_FAILED_S
    assert follower.step()
    assert follower.current is not None
    assert follower.current.version == 2
    assert follower.failed == {}
