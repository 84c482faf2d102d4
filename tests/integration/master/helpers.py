"""Shared helpers of the master's integration and fault tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from elasticps.master.snapshot import ChunkInfo

REPO = Path(__file__).resolve().parents[3]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def synthetic_chunks(num_chunks: int, rows: int = 100, per_file: int = 4) -> list[ChunkInfo]:
    """A dataset's chunk list without files: ``per_file`` row groups per Parquet path."""
    return [ChunkInfo(f"part-{i // per_file:05d}.parquet", i % per_file, rows)
            for i in range(num_chunks)]


def store_url_for(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "etcd":
        return str(request.getfixturevalue("etcd_server").url)
    return f"file://{tmp_path}/job.db"
