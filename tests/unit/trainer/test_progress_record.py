"""A trainer's job/progress record: its figures and its stage, over a real (embedded) store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.store import Store, open_store
from elasticps.store.keys import read_progress
from elasticps.trainer.progress import ProgressRecord
from elasticps.trainer.step_worker import LoopStats


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/s.db", "j")
    yield handle
    handle.close()


def test_a_stage_is_published_at_once_with_the_figures_and_no_speed(store: Store) -> None:
    record = ProgressRecord(store, "trainer-0-h-1", clock=lambda: 50.0)
    record.set_stage("writing data")  # before any training: an empty record that says so
    published = read_progress(store)["trainer-0-h-1"]
    assert (published.stage, published.samples, published.time) == ("writing data", 0, 50.0)
    record.set_stage(None)
    record.publish(LoopStats(samples=640, samples_per_s=320.0, loss_ewma=0.5))
    assert read_progress(store)["trainer-0-h-1"].samples_per_s == 320.0
    with record.during("evaluating the test set"):
        during = read_progress(store)["trainer-0-h-1"]
        assert (during.stage, during.samples, during.samples_per_s) == (
            "evaluating the test set", 640, 0.0)  # not training: no samples/s
    assert read_progress(store)["trainer-0-h-1"].stage is None
    for bad in ("", "   ", "x" * 61):
        with pytest.raises(ConfigError, match="stage"):
            record.set_stage(bad)
