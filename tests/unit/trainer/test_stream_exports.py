"""A stream's versions: what each records of the partitions trained through (from the master's
status document), the partitions it was the first to cover with their commit times (the
manifests' modification times, on real files), and freshness summed over versions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.data import write_dataset
from elasticps.data.stream import FsspecPartitionSource, Partition
from elasticps.trainer.model_dir import VersionRecord, version_path
from elasticps.trainer.stream_exports import (
    StreamVersions,
    freshness_seconds,
    freshness_summary,
    trained_through,
)

SCHEMA = {"label": {"name": "click", "kind": "binary"},
          "columns": {"user": {"kind": "categorical", "table": "user", "id_space": 10}}}
NAMES = [f"dt=2026-12-01/hour={h:02d}" for h in range(4)]
COMMITTED = [1000.0, 1010.0, 1020.0, 1030.0]


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    for name, committed in zip(NAMES, COMMITTED, strict=True):
        write_dataset({"user": np.arange(4), "click": np.array([0, 1, 0, 1], np.int8)},
                      str(tmp_path / name), SCHEMA)
        os.utime(tmp_path / name / "manifest.json", (committed, committed))
    return tmp_path


def status(appended: int, waiting: int) -> dict[str, Any]:
    trained = appended - waiting
    return {"stream": {"partitions": appended, "waiting": waiting,
                       "trained_through": NAMES[trained - 1] if trained else None}}


def record(version: int, stream: dict[str, Any] | None, published_at: float) -> VersionRecord:
    position = {} if stream is None else {"stream": stream}
    return VersionRecord(version, version_path(version), "full", version, 0, position,
                         published_at - 1, published_at)


def test_a_partitions_commit_time_is_its_manifests_modification_time(stream: Path) -> None:
    source = FsspecPartitionSource(str(stream))
    assert [source.committed_at(p) for p in source.partitions(None)] == COMMITTED
    assert source.committed_at(Partition("dt=2026-12-02/hour=00")) is None  # not there


def test_trained_through_reads_the_masters_status() -> None:
    assert trained_through(status(4, 1)) == (3, NAMES[2])
    assert trained_through(status(2, 2)) == (0, None)
    assert trained_through({}) == (0, None)  # a dataset's job: no stream


def test_each_version_records_how_far_it_trained_and_what_it_covered_first(
        stream: Path) -> None:
    stored: list[tuple[int, dict[str, Any]]] = []
    answers = [status(3, 1), status(4, 0)]
    notes = StreamVersions(str(stream), "", lambda: answers.pop(0),
                           lambda v, doc: stored.append((v, doc)))
    first = notes.position(None)
    assert first == {"stream": {"partitions": 2, "newest": NAMES[1],
                                "newest_committed_at": 1010.0}}
    notes.published(record(1, first["stream"], 1015.0))
    second = notes.position(record(1, first["stream"], 1015.0))
    assert second["stream"] == {"partitions": 4, "newest": NAMES[3],
                                "newest_committed_at": 1030.0}
    notes.published(record(2, second["stream"], 1032.5))
    assert stored == [
        (1, {"version": 1, "published_at": 1015.0,
             "partitions": {NAMES[0]: 1000.0, NAMES[1]: 1010.0}}),
        (2, {"version": 2, "published_at": 1032.5,
             "partitions": {NAMES[2]: 1020.0, NAMES[3]: 1030.0}})]
    docs = [doc for _, doc in stored]
    assert sorted(freshness_seconds(docs)) == [2.5, 5.0, 12.5, 15.0]
    assert freshness_summary(docs) == {"median": 8.75, "max": 15.0}


def test_a_backfills_versions_cover_partitions_from_its_start_only(stream: Path) -> None:
    stored: list[dict[str, Any]] = []
    answer = {"stream": {"partitions": 2, "waiting": 0, "trained_through": NAMES[3]}}
    notes = StreamVersions(str(stream), NAMES[2], lambda: answer,
                           lambda v, doc: stored.append(doc))
    assert notes.position(None)["stream"]["partitions"] == 2
    notes.published(record(1, None, 2000.0))
    assert list(stored[0]["partitions"]) == [NAMES[2], NAMES[3]]


def test_a_version_that_covers_nothing_new_records_no_freshness(stream: Path) -> None:
    stored: list[dict[str, Any]] = []
    notes = StreamVersions(str(stream), "", lambda: status(4, 2),
                           lambda v, doc: stored.append(doc))
    before = {"partitions": 2, "newest": NAMES[1], "newest_committed_at": 1010.0}
    assert notes.position(record(3, before, 1500.0)) == {"stream": before}
    notes.published(record(4, before, 1600.0))
    assert stored == []


def test_a_master_that_cannot_answer_leaves_the_previous_versions_mark(stream: Path) -> None:
    def failing() -> dict[str, Any]:
        raise ConnectionError("the master is failing over")

    notes = StreamVersions(str(stream), "", failing, lambda v, doc: None)
    before = {"partitions": 3, "newest": NAMES[2], "newest_committed_at": 1020.0}
    assert notes.position(record(3, before, 1500.0)) == {"stream": before}
    assert notes.position(None) == {}
