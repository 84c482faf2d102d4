"""Shared helpers of the master's integration and fault tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticps.data.manifest import ChunkRef


def synthetic_chunks(num_chunks: int, rows: int = 100, per_file: int = 4) -> list[ChunkRef]:
    """A dataset's chunk list without files: ``per_file`` row groups per Parquet path."""
    return [ChunkRef(f"part-{i // per_file:05d}.parquet", i % per_file, rows)
            for i in range(num_chunks)]


def store_url_for(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "etcd":
        return str(request.getfixturevalue("etcd_server").url)
    return f"file://{tmp_path}/job.db"
