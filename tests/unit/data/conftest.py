from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO

TINY = REPO / "tests" / "data" / "criteo_tiny.tsv"
# ../shared beside the repo root (CI); a worktree one level deeper finds it one level up.
SHARED_SAMPLE = next(
    (
        base / "shared" / "data" / "criteo_sample_100.tsv"
        for base in (REPO.parent, REPO.parent.parent)
        if (base / "shared" / "data" / "criteo_sample_100.tsv").exists()
    ),
    REPO.parent / "shared" / "data" / "criteo_sample_100.tsv",
)


@pytest.fixture
def tiny_tsv(tmp_path: Path) -> Path:
    """The repo's own 20-line Criteo sample, copied into the test's temp dir."""
    dest = tmp_path / "criteo_tiny.tsv"
    shutil.copyfile(TINY, dest)
    return dest


@pytest.fixture
def shared_sample(tmp_path: Path) -> Path:
    """100 real Criteo rows from ../shared (present in CI and in the workspace)."""
    if not SHARED_SAMPLE.exists():
        pytest.skip(f"{SHARED_SAMPLE} is not present (fresh clone without ../shared)")
    dest = tmp_path / "criteo_sample_100.tsv"
    shutil.copyfile(SHARED_SAMPLE, dest)
    return dest
