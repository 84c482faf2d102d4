"""The board's window: the newest trained partitions and the one in training, whatever waits
behind them."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticps.master import progressive
from elasticps.master.progressive import PartitionTasks, ProgressiveBoard
from elasticps.store import open_store


def test_a_backlog_behind_the_training_partition_does_not_push_trained_ones_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progressive, "SHOWN", 3)
    partitions = [PartitionTasks(f"p{i:03d}", float(i), 1, i < 4) for i in range(50)]
    with open_store(f"file://{tmp_path}/s.db", "j") as store:
        shown = ProgressiveBoard(store).look(partitions)
    assert [s["partition"] for s in shown] == ["p002", "p003", "p004"]
    assert [s["rows"] for s in shown] == [0, 0, 0]  # nothing scored yet
