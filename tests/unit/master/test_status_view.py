"""The status page's view, decided purely: timeline entries, charts, tables, ETA."""

from __future__ import annotations

from typing import Any

import pytest

from elasticps.master.status_document import (
    activity,
    document,
    eta_seconds,
    offline,
    pass_metrics,
    stages,
)
from elasticps.master.status_view import (
    MAX_POINTS,
    PServerSight,
    Sight,
    ViewMemory,
    job_fraction,
    pserver_figures,
    samples_rate,
    step_view,
    trainer_slot,
)
from elasticps.store.keys import PServerSlot, TrainerProgress


def status(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"job": "j", "state": "running", "pass": 0, "num_passes": 2,
                           "num_tasks": 10, "counts": {"todo": 6, "pending": 2, "done": 2,
                                                       "failed": 0},
                           "live_trainers": ["trainer-0-h-1", "trainer-1-h-2"],
                           "failure_log": [], "accounting": [], "pending": {}}
    doc.update(changes)
    return doc


def sight(now: float, *, progress: dict[str, TrainerProgress] | None = None,
          pservers: list[PServerSight] | None = None, **changes: Any) -> Sight:
    return Sight(now=now, node="master-a", status=status(**changes),
                 progress=progress or {}, pservers=pservers or [])


def kinds(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.kind, e.subject) for e in events]


def test_trainers_joining_and_leaving_and_the_first_pass_are_announced_once() -> None:
    memory, events = step_view(ViewMemory(), sight(10.0))
    assert sorted(kinds(events)) == [("pass", "pass 1"), ("trainer", "trainer-0"),
                                     ("trainer", "trainer-1")]
    memory, events = step_view(memory, sight(11.0))
    assert events == []
    memory, events = step_view(memory, sight(12.0, live_trainers=["trainer-0-h-1"]))
    assert kinds(events) == [("trainer", "trainer-1")]
    assert "left the job" in events[0].message


def test_a_new_process_in_a_pserver_slot_or_a_trainer_index_is_a_restart() -> None:
    slot = PServerSlot("127.0.0.1:1", pid=100, host="h")
    progress = {"trainer-0-h-1": TrainerProgress(samples=5, time=9.0)}
    memory, events = step_view(ViewMemory(), sight(10.0, progress=progress,
                                                   pservers=[PServerSight(0, slot)]))
    assert not [e for e in events if e.kind == "restart"]
    progress = {**progress, "trainer-0-h-7": TrainerProgress(samples=1, time=10.5)}
    moved = PServerSlot("127.0.0.1:2", pid=200, host="h")
    memory, events = step_view(memory, sight(11.0, progress=progress,
                                             pservers=[PServerSight(0, moved)]))
    restarts = sorted((e.subject, e.message) for e in events if e.kind == "restart")
    assert restarts == [
        ("pserver-0", "pserver slot pserver-0 came back as pid 200 on h at 127.0.0.1:2 "
                      "(restart 1)"),
        ("trainer-0", "trainer trainer-0 came back as trainer-0-h-7 (restart 1)")]
    memory, events = step_view(memory, sight(12.0, progress=progress,
                                             pservers=[PServerSight(0, None)]))
    assert not [e for e in events if e.kind == "restart"]  # down is not a restart
    assert memory.incarnations["pserver-0"] == ("pid 100 on h", "pid 200 on h")


def test_failed_tasks_reconciliations_and_the_end_reach_the_timeline_once() -> None:
    failure = {"pass": 0, "task": 3, "reason": "chunk 7 is truncated"}
    short = {"pass": 0, "complete": False, "expected_batches": 40,
             "missing_tasks": {"3": [1, 2]}}
    whole = {"pass": 0, "complete": True, "expected_batches": 40, "missing_tasks": {}}
    memory, events = step_view(ViewMemory(), sight(1.0, failure_log=[failure],
                                                   accounting=[short]))
    found = {e.kind: e.message for e in events}
    assert found["task_failed"] == "task 3 failed in pass 1: chunk 7 is truncated"
    assert found["recovery"] == ("pass 1: pserver shards miss 2 batch(es) of task 3; recovery "
                                 "dispatches recompute them")
    memory, events = step_view(memory, sight(2.0, failure_log=[failure], accounting=[whole]))
    assert kinds(events) == [("reconciled", "pass 1")]
    memory, events = step_view(memory, sight(3.0, failure_log=[failure], accounting=[whole],
                                             state="succeeded", **{"pass": 1}))
    assert sorted(kinds(events)) == [("job", "j"), ("pass", "pass 2")]
    memory, events = step_view(memory, sight(4.0, failure_log=[failure], accounting=[whole],
                                             state="succeeded", **{"pass": 1}))
    assert events == []


def test_samples_per_second_counts_fresh_live_trainers_only() -> None:
    progress = {"a": TrainerProgress(samples_per_s=100.0, time=10.0),
                "b": TrainerProgress(samples_per_s=50.0, time=2.0),  # blocked for 8 s
                "gone": TrainerProgress(samples_per_s=70.0, time=10.0)}
    assert samples_rate(progress, frozenset({"a", "b"}), 10.5) == 100.0


def test_the_series_halves_its_resolution_instead_of_growing_without_bound() -> None:
    memory = ViewMemory()
    for tick in range(MAX_POINTS + 1):
        memory, _ = step_view(memory, sight(float(tick)))
    assert len(memory.series) == (MAX_POINTS + 1 + 1) // 2
    assert memory.stride == 2
    before = len(memory.series)
    memory, _ = step_view(memory, sight(float(MAX_POINTS + 1)))  # odd tick: no point
    memory, _ = step_view(memory, sight(float(MAX_POINTS + 2)))
    assert len(memory.series) == before + 1


def test_progress_fraction_and_eta() -> None:
    assert job_fraction(status()) == pytest.approx(2 / 20)
    assert job_fraction(status(**{"pass": 1})) == pytest.approx(12 / 20)
    assert job_fraction(status(state="succeeded")) == 1.0
    assert job_fraction({"state": "waiting_for_dataset", "pass": None}) == 0.0
    # 1,000 records a pass, 2 passes; 100 samples/s over the last minute
    series = [{"t": 0.0, "samples_per_s": 100.0}, {"t": 10.0, "samples_per_s": 100.0}]
    running = status(records_per_pass=1000)
    assert eta_seconds(running, 0.2, series) == pytest.approx(16.0)  # 1,600 records left
    assert eta_seconds(running, 0.2, []) is None
    assert eta_seconds(running, 0.2, [{"t": 0.0, "samples_per_s": 0.0}]) is None
    assert eta_seconds(status(state="succeeded"), 1.0, series) == 0.0
    assert eta_seconds(status(state="failed", records_per_pass=1000), 0.2, series) is None


def test_the_share_done_and_the_eta_move_within_a_task() -> None:
    """Two tasks of ten pending: as their trainers report records done, the job's share
    grows and the ETA shrinks, with no task finishing."""
    series = [{"t": 0.0, "samples_per_s": 50.0}]
    before = status(records_per_pass=1000, running_share=0.0)
    later = status(records_per_pass=1000, running_share=1.2)  # the two tasks 60 % done
    assert job_fraction(later) == pytest.approx((2 + 1.2) / 20)
    assert job_fraction(later) > job_fraction(before)
    eta_before = eta_seconds(before, job_fraction(before), series)
    eta_later = eta_seconds(later, job_fraction(later), series)
    assert eta_before is not None
    assert eta_later is not None
    assert eta_before - eta_later == pytest.approx(1.2 / 20 * 2000 / 50)


def test_pass_metrics_average_the_trainers_that_reported_each_pass() -> None:
    progress = {"a": TrainerProgress(pass_metrics={"0": {"test_auc": 0.7, "cost": 0.5},
                                                   "1": {"test_auc": 0.8}}),
                "b": TrainerProgress(pass_metrics={"0": {"test_auc": 0.9, "cost": 0.3}})}
    assert pass_metrics(progress) == [{"pass": 0, "cost": 0.4, "test_auc": 0.8},
                                      {"pass": 1, "test_auc": 0.8}]


def test_the_document_has_a_row_per_trainer_index_and_pserver_shard() -> None:
    progress = {"trainer-0-h-1": TrainerProgress(samples=100, samples_per_s=9.0, time=5.0,
                                                 loss=0.5),
                "trainer-0-h-9": TrainerProgress(samples=40, samples_per_s=7.0, time=9.0,
                                                 loss=0.4),
                "trainer-1-h-2": TrainerProgress(samples=60, samples_per_s=8.0, time=9.5)}
    live = ["trainer-0-h-9", "trainer-1-h-2"]
    pservers = [PServerSight(1, None), PServerSight(0, PServerSlot("a:1", 5, "h"),
                                                    {"rows": 10.0, "bytes": 400.0})]
    memory, _ = step_view(ViewMemory(), sight(10.0, progress=progress, pservers=pservers,
                                              live_trainers=live, pending={"trainer-1-h-2": [4]}))
    memory, _ = step_view(memory, sight(11.0, progress=progress, live_trainers=live,
                                        pservers=[PServerSight(0, None), PServerSight(1, None)]))
    doc = document(status(live_trainers=live, pending={"trainer-1-h-2": [4]}), memory,
                   sight(11.0, progress=progress, live_trainers=live,
                         pservers=[PServerSight(0, None), PServerSight(1, None)]),
                   events=[], now=11.0)
    rows = {r["name"]: r for r in doc["trainers"]}
    assert list(rows) == ["trainer-0", "trainer-1"]
    assert rows["trainer-0"]["process"] == "trainer-0-h-9"
    assert rows["trainer-0"]["samples"] == 140
    assert rows["trainer-0"]["last_seen_s"] == 2.0
    assert rows["trainer-1"]["tasks"] == [4]
    assert [p["name"] for p in doc["pservers"]] == ["pserver-0", "pserver-1"]
    assert doc["pservers"][0]["rows"] == 10  # the last scraped, while it is down
    assert doc["pservers"][0]["up"] is False
    assert doc["samples_total"] == 200
    again = ViewMemory.from_document(doc)
    assert again == memory  # the memory travels inside the document to the next leader


def test_trainer_slot_of_a_process_name() -> None:
    assert trainer_slot("trainer-12-host-a-99") == "trainer-12"
    assert trainer_slot("worker") == "worker"


def test_a_long_list_of_tasks_is_shortened_in_numeric_order() -> None:
    short = {"pass": 2, "complete": False, "expected_batches": 9,
             "missing_tasks": {str(t): [0] for t in (10, 2, 1, 33, 4, 5, 6, 7, 8, 9)}}
    _, events = step_view(ViewMemory(), sight(1.0, accounting=[short]))
    recovery = next(e for e in events if e.kind == "recovery")
    assert recovery.message == ("pass 3: pserver shards miss 10 batch(es) of tasks 1, 2, 4, 5, "
                                "6, 7, 8, 9 and 2 more; recovery dispatches recompute them")


def over(state: str, **changes: Any) -> dict[str, Any]:
    """The document of a job in ``state`` whose trainers and pservers have all exited."""
    progress = {"trainer-0-h-1": TrainerProgress(samples=10, time=5.0),
                "trainer-1-h-2": TrainerProgress(samples=10, time=5.0)}
    done = status(state=state, live_trainers=[], **changes)
    pservers = [PServerSight(0, None), PServerSight(1, None)]
    return document(done, ViewMemory(), Sight(9.0, "m", done, progress, pservers),
                    events=[], now=9.0)


def test_a_finished_jobs_processes_show_as_finished_not_gone_or_down() -> None:
    doc = over("succeeded")
    assert [t["state"] for t in doc["trainers"]] == ["finished", "finished"]
    assert [p["state"] for p in doc["pservers"]] == ["stopped", "stopped"]
    assert doc["progress"]["eta_s"] == 0.0
    running = over("running")  # the same exits while the job runs: they are news
    assert [t["state"] for t in running["trainers"]] == ["left", "left"]
    assert [p["state"] for p in running["pservers"]] == ["down", "down"]
    # the launcher failed the job on trainer 1's exit: saved, then served by `elasticps ui`
    failed = offline({**running, "state": "failed", "failure": {
        "process": "trainer 1", "traceback": "Traceback ...\nValueError: bad row"}}, 10.0)
    assert [t["state"] for t in failed["trainers"]] == ["stopped", "failed"]
    assert [p["state"] for p in failed["pservers"]] == ["stopped", "stopped"]
    assert failed["progress"]["eta_s"] is None  # not "done"


def test_the_trainers_stages_say_what_the_job_does_outside_training() -> None:
    progress = {"trainer-0-h-1": TrainerProgress(stage="writing data"),
                "trainer-1-h-2": TrainerProgress(stage="waiting for data"),
                "trainer-2-h-3": TrainerProgress(stage="exporting")}  # not live: not said
    live = ["trainer-0-h-1", "trainer-1-h-2"]
    said = stages(progress, live)
    assert said == {"trainer-0": "writing data", "trainer-1": "waiting for data"}
    waiting = {"state": "waiting_for_dataset", "pass": None}
    assert activity(waiting, said) == "writing data (trainer-0); waiting for data (trainer-1)"
    assert activity(waiting, {}) == "starting"
    assert activity(status(), {}) is None
    doc = document(status(live_trainers=live), ViewMemory(),
                   Sight(1.0, "m", status(live_trainers=live), progress), events=[], now=1.0)
    assert doc["activity"] == "writing data (trainer-0); waiting for data (trainer-1)"
    assert {t["name"]: t["stage"] for t in doc["trainers"]} == {
        "trainer-0": "writing data", "trainer-1": "waiting for data", "trainer-2": None}


def test_a_stream_says_it_waits_for_data_or_where_it_stops() -> None:
    idle = status(stream={"waiting_for_data": True, "refused": None})
    assert activity(idle, {}) == "waiting for the stream's next partition"
    assert activity({**idle, "reconciling": True}, {}) is None  # it checks the pservers first
    assert activity(idle, {"trainer-0": "exporting"}) == "exporting (trainer-0)"
    stopped = status(stream={"waiting_for_data": True,
                             "refused": "partition h=2 has another schema"})
    assert activity(stopped, {"trainer-0": "exporting"}) == (
        "the stream stops: partition h=2 has another schema")
    assert activity({**stopped, "state": "failed"}, {}) is None


def test_the_final_metrics_and_each_trainers_series_reach_the_document() -> None:
    progress = {"trainer-0-h-1": TrainerProgress(samples_per_s=40.0, loss=0.5, time=10.0),
                "trainer-1-h-2": TrainerProgress(samples_per_s=60.0, loss=0.7, time=10.0)}
    live = ["trainer-0-h-1", "trainer-1-h-2"]
    seen = Sight(10.0, "m", status(live_trainers=live), progress,
                 result={"auc": 0.78, "best_auc": 0.8})
    memory, _ = step_view(ViewMemory(), seen)
    point = memory.series[-1]
    assert point["trainer_samples_per_s"] == {"trainer-0": 40.0, "trainer-1": 60.0}
    assert point["trainer_loss"] == {"trainer-0": 0.5, "trainer-1": 0.7}
    doc = document(seen.status, memory, seen, events=[], now=10.0)
    assert doc["result"] == {"auc": 0.78, "best_auc": 0.8}


def test_pserver_latency_and_cpu_come_from_two_scrapes() -> None:
    first = {"t": 10.0, "push_seconds": 1.0, "push_count": 100.0, "pull_seconds": 2.0,
             "pull_count": 400.0, "cpu_seconds": 5.0, "memory_bytes": 1e8}
    second = {**first, "t": 12.0, "push_seconds": 1.5, "push_count": 200.0,
              "cpu_seconds": 6.0}
    figures = pserver_figures(pserver_figures(None, first), second)
    assert figures["push_ms"] == pytest.approx(5.0)  # 0.5 s over 100 pushes
    assert "pull_ms" not in figures  # no pull since the first scrape, and none known before
    assert figures["cpu_percent"] == pytest.approx(50.0)  # 1 CPU second in 2 s
    idle = pserver_figures(figures, {**second, "t": 14.0})
    assert idle["push_ms"] == pytest.approx(5.0)  # no push since: the last value stays
    assert idle["cpu_percent"] == 0.0
    shard = PServerSight(0, PServerSlot("a:1", 5, "h"), first)
    memory, _ = step_view(ViewMemory(), sight(10.0, pservers=[shard]))
    memory, _ = step_view(memory, sight(12.0, pservers=[PServerSight(0, shard.slot, second)]))
    row = document(status(), memory, sight(12.0, pservers=[shard]), events=[], now=12.0
                   )["pservers"][0]
    assert (row["push_ms"], row["cpu_percent"], row["memory_bytes"]) == (5.0, 50.0, 100000000)
