"""The telemetry's store records: the timeline, the saved status page, metrics endpoints, and
the progress fields the page reads; the record of a table written as a dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticps.errors import StoreValueError
from elasticps.store import open_store
from elasticps.store.keys import (
    JobEvent,
    MetricsEndpoint,
    TableDataset,
    TrainerProgress,
    decode_history,
    encode_history,
    read_events,
    record_event,
    table_keys,
    trim_events,
)


def test_events_are_kept_in_time_order_and_trimmed(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/s.db", "j") as store:
        for i in range(5):
            record_event(store, JobEvent("restart", f"pserver-{i}", f"restart {i}", "m",
                                         time=100.0 + i))
        store.put("job/events/00000000000000000050-bad", b"{not json")
        assert [e.subject for e in read_events(store)] == [f"pserver-{i}" for i in range(5)]
        assert [e.subject for e in read_events(store, limit=2)] == ["pserver-3", "pserver-4"]
        assert trim_events(store, keep=3) == 3
        assert [e.subject for e in read_events(store)] == ["pserver-2", "pserver-3",
                                                            "pserver-4"]


def test_an_event_of_an_unknown_kind_or_shape_is_refused() -> None:
    good = JobEvent("scale", "trainers", "asked for 3", "scale")
    assert JobEvent.decode(good.encode(), "k") == good
    with pytest.raises(StoreValueError, match="unknown event kind"):
        JobEvent.decode(json.dumps({**good.as_dict(), "kind": "party"}).encode(), "k")
    with pytest.raises(StoreValueError, match="'message'"):
        JobEvent.decode(json.dumps({**good.as_dict(), "message": 3}).encode(), "k")


def test_the_saved_page_and_metrics_endpoints_round_trip() -> None:
    doc = {"job": "j", "series": [{"t": 1.0}], "events": []}
    assert decode_history(encode_history(doc)) == doc
    with pytest.raises(StoreValueError, match="'series'"):
        decode_history(b'{"events": []}')
    nan = float("nan")
    assert decode_history(encode_history({"series": [{"loss": nan}], "events": [],
                                          "x": (float("inf"), 1)})) == {
        "series": [{"loss": None}], "events": [], "x": [None, 1]}  # a diverged loss is null
    endpoint = MetricsEndpoint("pserver", "pserver-0", "http://h:1/metrics", 7, "h")
    assert endpoint.key == "metrics/pserver/pserver-0"
    assert MetricsEndpoint.decode(endpoint.encode(), endpoint.key) == endpoint
    with pytest.raises(StoreValueError, match="http"):
        MetricsEndpoint.decode(json.dumps({"role": "x", "name": "y", "url": "file:///etc",
                                           "pid": 1, "host": "h"}).encode(), "k")


def test_trainer_progress_carries_rate_time_and_pass_metrics() -> None:
    progress = TrainerProgress(1, 640, 10, 0.5, 2.0, 1, {"forward": 0.1}, 320.0, 99.5,
                               {"0": {"test_auc": 0.7}})
    assert TrainerProgress.decode(progress.encode(), "k") == progress
    old = json.dumps({"pass": 0, "samples": 5, "batches": 1, "loss": None, "train_s": 1.0,
                      "tasks": 0, "timers": {}}).encode()  # written before these fields
    assert TrainerProgress.decode(old, "k") == TrainerProgress(0, 5, 1, None, 1.0, 0, {})
    with pytest.raises(StoreValueError, match="pass_metrics"):
        TrainerProgress.decode(json.dumps({"pass_metrics": [1]}).encode(), "k")
    exporting = TrainerProgress(samples=5, stage="exporting")
    assert TrainerProgress.decode(exporting.encode(), "k").stage == "exporting"
    with pytest.raises(StoreValueError, match="stage"):
        TrainerProgress.decode(TrainerProgress(stage="x" * 61).encode(), "k")


def test_a_table_dataset_record_round_trips_and_a_malformed_one_names_its_key() -> None:
    lock, done = table_keys("train")
    assert (lock, done) == ("job/tables/train/lock", "job/tables/train/done")
    record = TableDataset("/w/datasets/train-0123456789abcdef", "ab" * 32, "trainer-0-h-1")
    assert TableDataset.decode(record.encode(), done) == record
    with pytest.raises(StoreValueError, match=r"job/tables/train/done.*'url'"):
        TableDataset.decode(b'{"fingerprint": "x", "by": "t"}', done)
