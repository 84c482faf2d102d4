"""The status page's loop over a real (embedded) store: a takeover is recorded as a failover
and continues the saved charts; the saved document is what the next leader reads."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from elasticps.data.score_histogram import ScoreHistogram
from elasticps.master.progressive import PartitionTasks
from elasticps.master.status_loop import EVENTS_SHOWN, StatusLoop
from elasticps.master.telemetry import MasterMetrics
from elasticps.pserver.telemetry import CheckpointClock, PServerMetrics
from elasticps.store import Store, open_store
from elasticps.store.api import Op
from elasticps.store.keys import (
    JOB_HISTORY,
    JobEvent,
    PServerSlot,
    TrainerProgress,
    encode_history,
    pserver_slot,
    publish_progress,
    publish_result,
    publish_task_scores,
    read_events,
    read_history,
    record_event,
)
from elasticps.telemetry.role import RoleTelemetry


class FakeState:
    """What the status loop reads of the master: its node, its job, the queue's status."""

    def __init__(self, node: str, **status: Any) -> None:
        self.node, self.job = node, "j"
        self.doc = {"job": "j", "master": node, "state": "running", "pass": 0, "num_passes": 1,
                    "num_tasks": 4, "counts": {"todo": 2, "pending": 0, "done": 2, "failed": 0},
                    "live_trainers": ["trainer-0-h-1"], "failure_log": [], "accounting": [],
                    "pending": {}, **status}
        self.partitions: list[PartitionTasks] = []  # a stream's, as MasterState has them

    def status(self) -> dict[str, Any]:
        return dict(self.doc)

    def stream_partitions(self) -> list[PartitionTasks]:
        return list(self.partitions)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/s.db", "j")
    yield handle
    handle.close()


def status_loop(store: Store, state: FakeState, pservers: int = 0) -> StatusLoop:
    def commit(ops: Sequence[Op]) -> None:
        store.txn([], list(ops))

    return StatusLoop(store, state, num_pservers=pservers,  # type: ignore[arg-type]
                      commit=commit, halt=threading.Event(), interval=0.01, save_every=1)


def test_a_new_leader_records_the_failover_and_continues_the_charts(store: Store) -> None:
    publish_progress(store, "trainer-0-h-1", TrainerProgress(samples=10, time=1.0, loss=0.5))
    first = status_loop(store, FakeState("master-a"))
    first.resume()
    first.tick()
    first.tick()
    saved = read_history(store)
    assert saved is not None
    assert saved["master"] == "master-a"
    assert len(saved["series"]) == 2
    second = status_loop(store, FakeState("master-b"))
    second.resume()
    failovers = [e for e in read_events(store) if e.kind == "failover"]
    assert [e.message for e in failovers] == [
        "master master-b took over from master-a (pass 1)"]
    assert len(second.document()["series"]) == 2  # before its first tick: the saved charts
    second.tick()
    doc = second.document()
    assert len(doc["series"]) == 3
    assert [e["kind"] for e in doc["events"]].count("trainer") == 1  # not announced again
    assert doc["trainers"][0]["name"] == "trainer-0"
    assert doc["failovers_total"] == 1


def test_failovers_are_counted_past_the_timeline_the_page_shows(store: Store) -> None:
    """The counter is the view's, carried from leader to leader: the failover events may have
    left the newest EVENTS_SHOWN entries long ago, and a Prometheus counter must not drop."""
    for node in ("master-a", "master-b"):
        loop = status_loop(store, FakeState(node))
        loop.resume()
        loop.tick()  # saves (save_every=1)
    for i in range(EVENTS_SHOWN + 1):
        record_event(store, JobEvent("pass", "job", f"filler {i}", "test"))
    third = status_loop(store, FakeState("master-c"))
    third.resume()
    third.tick()
    shown = [e["message"] for e in third.document()["events"] if e["kind"] == "failover"]
    assert shown == ["master master-c took over from master-b (pass 1)"]  # a->b scrolled off
    telemetry = RoleTelemetry("j", "master", "master-c")
    MasterMetrics(telemetry.registry, third.document)
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(telemetry.registry).decode())}
    assert [(s.name, s.value) for s in families["elasticps_master_failovers"].samples] == [
        ("elasticps_master_failovers_total", 2.0)]


def test_no_failover_once_the_job_is_over(store: Store) -> None:
    store.put(JOB_HISTORY, encode_history({"master": "master-a", "state": "succeeded",
                                           "series": [], "events": []}))
    status_loop(store, FakeState("master-b", state="succeeded")).resume()
    assert read_events(store) == []


def test_a_stopping_status_loop_takes_a_last_look_and_saves_it(store: Store) -> None:
    state = FakeState("master-a")
    loop = status_loop(store, state)
    loop.halt.set()
    state.doc.update(state="succeeded")
    loop.run()
    saved = read_history(store)
    assert saved is not None
    assert saved["state"] == "succeeded"
    assert "every pass is done: training succeeded" in [e["message"] for e in saved["events"]]


def test_the_page_reads_a_pservers_latency_cpu_and_memory_and_the_jobs_result(
        store: Store) -> None:
    """A real pserver registry served over HTTP and scraped by the loop twice: the push
    latency of the calls between the two scrapes, the process's CPU and memory."""
    telemetry = RoleTelemetry("j", "pserver", "pserver-0")
    metrics = PServerMetrics(telemetry.registry, lambda: None, CheckpointClock())
    telemetry.start("127.0.0.1", 0)
    telemetry.publish(store, 10)
    store.put(pserver_slot(0), PServerSlot("127.0.0.1:1").encode())
    try:
        clock = iter(float(t) for t in range(100, 200))
        loop = status_loop(store, FakeState("master-a"), pservers=1)
        loop.clock = lambda: next(clock)
        loop.tick()
        for _ in range(4):
            metrics.rpc.labels(method="Push").observe(0.008)
        publish_result(store, {"auc": 0.78, "best_auc": 0.8})
        loop.tick()
        doc = loop.document()
    finally:
        telemetry.close()
    row = doc["pservers"][0]
    assert row["push_ms"] == 8.0
    assert row["pull_ms"] is None  # no pull was served
    assert row["memory_bytes"] > 10 * 2**20  # this very process: Python and its imports
    assert row["cpu_percent"] is not None
    assert row["cpu_percent"] >= 0
    assert doc["result"] == {"auc": 0.78, "best_auc": 0.8}


def _scores(labels: list[int], probs: list[float]) -> dict[str, Any]:
    hist = ScoreHistogram()
    hist.add(np.array(labels), np.array(probs))
    return hist.to_json()


def test_a_streams_partitions_show_their_progressive_auc_final_once_every_task_is_in(
        store: Store) -> None:
    state = FakeState("master-a")
    state.partitions = [PartitionTasks("dt=2026-12-01/hour=13", 1.0, 2, True),
                        PartitionTasks("dt=2026-12-01/hour=14", 2.0, 1, False),
                        PartitionTasks("dt=2026-12-01/hour=15", 3.0, 1, False)]
    first, second, third = (p.name for p in state.partitions)
    publish_task_scores(store, first, 0, _scores([1, 0], [0.9, 0.2]))  # task 1 not in yet
    publish_task_scores(store, second, 2, _scores([1, 0, 1], [0.1, 0.6, 0.9]))
    publish_task_scores(store, third, 3, {"buckets": "not one"})  # never read: not started
    loop = status_loop(store, state)
    telemetry = RoleTelemetry("j", "master", "master-a")
    MasterMetrics(telemetry.registry, loop.document)

    def gauge() -> list[float]:
        families = {f.name: f for f in text_string_to_metric_families(
            generate_latest(telemetry.registry).decode())}
        family = families.get("elasticps_master_stream_progressive_auc")
        return [s.value for s in family.samples] if family else []

    loop.tick()
    shown = loop.document()["progressive"]
    assert [(p["partition"], p["rows"], p["auc"], p["final"]) for p in shown] == [
        (first, 2, 1.0, False), (second, 3, 0.5, False)]
    assert gauge() == []  # nothing final yet
    publish_task_scores(store, first, 1, _scores([0, 1], [0.7, 0.6]))
    loop.tick()
    shown = loop.document()["progressive"]
    assert (shown[0]["rows"], shown[0]["auc"], shown[0]["final"]) == (4, 0.75, True)
    assert gauge() == [0.75]
    publish_task_scores(store, first, 1, _scores([0], [0.99]))  # final: never read again
    loop.tick()
    assert loop.document()["progressive"][0]["rows"] == 4
