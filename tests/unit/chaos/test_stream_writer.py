"""The chaos stream's writer and landing watch: partitions landed under a prefix in order (each
a real dataset, committed by its manifest), the end marker last, and every landing timed from
the master's status as the status shows it appended and trained through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elasticps.chaos.oracle import OracleSpec
from elasticps.chaos.report import problems
from elasticps.chaos.stream_writer import LandingWatch, StreamWriter, partition_name
from elasticps.data.stream import FsspecPartitionSource


def test_partitions_land_in_order_with_their_rows_then_the_end_marker(tmp_path: Path) -> None:
    prefix = str(tmp_path / "stream")
    writer = StreamWriter(prefix, 3, 100, 40, interval=0.01)
    writer.land_first()
    source = FsspecPartitionSource(prefix)
    assert [p.name for p in source.partitions(None)] == ["dt=2026-12-01/hour=00"]
    assert not source.ended()
    writer.start()
    assert writer.wait_for_landing(2, timeout=30)
    writer.stop()  # joins the thread: the marker follows the last partition
    assert source.ended()
    assert writer.ended_at is not None
    assert [p.name for p in source.partitions(None)] == [partition_name(i) for i in range(3)]
    rows, starts = OracleSpec(prefix, 1, 25, 2, stream=True).batch_starts()
    assert rows == 300
    assert starts.tolist() == [0, 25, 40, 65, 80, 100, 125, 140, 165, 180, 200, 225, 240, 265,
                               280]  # chunks of 40, 40, 20 rows per partition, in order
    assert partition_name(25) == "dt=2026-12-02/hour=01"
    with pytest.raises(ValueError, match="do not fit"):
        StreamWriter(prefix, 24 * 28 + 1, 1, 1, 1.0)


class Status:
    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None

    def status(self) -> dict[str, Any] | None:
        return self.doc


def test_each_landing_is_timed_to_its_append_and_its_training_and_bounded(
        tmp_path: Path) -> None:
    writer = StreamWriter(str(tmp_path / "s"), 3, 10, 10, interval=60.0)
    writer.land_first()
    watch = LandingWatch(writer, Status(), lambda: True)
    watch.step({"partitions": 0, "trained_through": None}, done=False)
    assert (writer.landings[0].appended_s, writer.landings[0].trained_s) == (None, None)
    watch.step({"partitions": 1, "trained_through": None}, done=False)
    first = writer.landings[0]
    assert first.appended_s is not None
    assert first.appended_s >= 0
    assert first.trained_s is None
    watch.step({"partitions": 1, "trained_through": partition_name(0)}, done=False)
    assert writer.landings[0].trained_s is not None
    report = writer.report(bound=10.0)
    assert (report["landed"], report["ok"]) == (1, False)  # two partitions never landed
    assert report["over_bound"] == []
    said = problems(_report(report))
    assert said == ["the stream did not stay live: 1 of 3 partitions landed, and 0 were not "
                    "trained through within 10s of their commit (none; under 'stream')"]


def _report(stream: dict[str, Any]) -> dict[str, Any]:
    """A passing report but for its stream."""
    return {"outcome_fault_free": "skipped", "job_outcome": "succeeded",
            "outcome": "succeeded", "duplicates": 0, "missing": 0, "oracle": False,
            "reshards": [], "reshards_planned": [], "schedule_reshards": 0,
            "store_outages": 0, "store_outages_planned": 0, "autoscale": False,
            "kills_short": 0, "stream": stream}
