"""The master's Prometheus metrics.

Read at scrape time from the leader's status document (nothing to update on the request path):
``elasticps_master_leader``, ``elasticps_master_job_state{state}`` (1 for the job's state,
0 for the others: waiting_for_dataset, running, succeeded, failed),
``elasticps_master_tasks{state}``, ``elasticps_master_pass`` (1-based, as the page shows it),
``elasticps_master_num_passes``, ``elasticps_master_pass_progress_ratio``,
``elasticps_master_job_progress_ratio``, ``elasticps_master_records_total``,
``elasticps_master_tasks_finished_total``, ``elasticps_master_task_failures_total``,
``elasticps_master_recoveries_total`` (recovery dispatches), ``elasticps_master_reconciling``,
``elasticps_master_live_trainers`` and ``elasticps_master_failovers_total`` (takeovers, counted
by the status page's view and carried from leader to leader), and per pserver slot and
trainer index what the page's rows show: ``elasticps_master_pserver_up{shard}`` (the slot is
held), ``elasticps_master_pserver_restarts_total{shard}`` and
``elasticps_master_trainer_restarts_total{trainer}``. A job training a stream adds its lag:
``elasticps_master_stream_lag_seconds`` (the age, by the wall clock, of the newest partition
trained through: every partition up to it is trained; absent while none is, or partitions have
no time), ``elasticps_master_stream_partitions_waiting`` (appended, not trained through yet),
``elasticps_master_stream_partitions_total`` (appended), ``elasticps_master_stream_idle``
(1 while the trainers wait for the next partition) and ``elasticps_master_stream_refused``
(1 while the stream stops at a partition it refuses), and its progressive validation:
``elasticps_master_stream_progressive_auc`` (the AUC of the newest trained partition as the
model scored it before training on it; master/progressive.py). Observed as they happen:
``elasticps_master_dispatch_seconds`` (a GetTask or FinishAndGetTask answered, persistence
included) and
``elasticps_master_store_write_seconds`` (every fenced write of the queue's state).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from elasticps.master.service import JOB_STATES, MasterServicer, MasterState
from elasticps.master.status_view import trainer_index
from elasticps.proto import master_pb2
from elasticps.telemetry.exporter import CallbackCollector

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0)


class MasterMetrics:
    """The master's histograms and its scrape-time collector over ``status()``."""

    def __init__(self, registry: CollectorRegistry,
                 status: Callable[[], dict[str, Any] | None]) -> None:
        self.dispatch = Histogram(
            "elasticps_master_dispatch_seconds", "Time to answer a GetTask or a "
            "FinishAndGetTask, its persisted change included", buckets=_LATENCY_BUCKETS,
            registry=registry)
        self.store_write = Histogram(
            "elasticps_master_store_write_seconds", "Time of one fenced store write of the "
            "queue's state", buckets=_LATENCY_BUCKETS, registry=registry)
        self._status = status
        registry.register(CallbackCollector(self._collect))

    def _collect(self) -> Iterable[Metric]:
        doc = self._status() or {}
        yield _gauge("leader", "1 while this master leads and serves",
                     1.0 if doc.get("leader") and doc.get("state") else 0.0)
        state = doc.get("state")
        if state in JOB_STATES:
            states = GaugeMetricFamily("elasticps_master_job_state", "1 for the job's state "
                                       "(the status document's), 0 for the others",
                                       labels=["state"])
            for name in JOB_STATES:
                states.add_metric([name], 1.0 if name == state else 0.0)
            yield states
        yield from _queue(doc)
        yield from _stream(doc.get("stream"))
        yield from _progressive(doc.get("progressive"))
        yield _gauge("live_trainers", "Trainers the master sees alive",
                     float(len(doc.get("live_trainers") or [])))
        for name, help_text, key in (
                ("records", "Records of finished tasks, every pass", "records_total"),
                ("tasks_finished", "Tasks finished, every pass", "tasks_finished_total"),
                ("task_failures", "Failed task attempts (lease expired, trainer lost, "
                 "TaskFailed)", "failures_total"),
                ("recoveries", "Recovery dispatches (batches some pserver shard missed)",
                 "recoveries_total"),
                ("failovers", "Times a master took over the job from another",
                 "failovers_total")):
            value = doc.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield _counter(name, help_text, float(value))
        yield from _rows(doc)


def _queue(doc: dict[str, Any]) -> Iterable[Metric]:
    """The tasks of the pass and where the job is."""
    counts = doc.get("counts")
    if isinstance(counts, dict):
        tasks = GaugeMetricFamily("elasticps_master_tasks", "Tasks of the current pass by "
                                  "state", labels=["state"])
        for state in ("todo", "pending", "done", "failed"):
            tasks.add_metric([state], float(counts.get(state, 0)))
        yield tasks
        num_tasks = float(doc.get("num_tasks") or 0)
        done = float(counts.get("done", 0)) + float(counts.get("failed", 0))
        yield _gauge("pass_progress_ratio", "Share of the current pass's tasks done or "
                     "failed", done / num_tasks if num_tasks else 0.0)
        progress = doc.get("progress") or {}
        if isinstance(progress, dict) and "fraction" in progress:
            yield _gauge("job_progress_ratio", "Share of the whole job (every pass) done",
                         float(progress["fraction"]))
    pass_id = doc.get("pass")
    if isinstance(pass_id, int) and not isinstance(pass_id, bool):
        yield _gauge("pass", "The pass being trained, 1-based (1 during the first pass)",
                     float(pass_id + 1))
    for name, help_text, key in (
            ("num_passes", "Passes the job trains", "num_passes"),
            ("reconciling", "1 while the pass waits for the pservers' accounting",
             "reconciling")):
        value = doc.get(key)
        if isinstance(value, bool | int | float):
            yield _gauge(name, help_text, float(value))


def _stream(stream: Any) -> Iterable[Metric]:
    """A stream's lag and what waits (the status document's ``stream``)."""
    if not isinstance(stream, dict):
        return
    lag = stream.get("lag_s")
    if isinstance(lag, int | float) and not isinstance(lag, bool):
        yield _gauge("stream_lag_seconds", "Age of the newest partition of the stream trained "
                     "through (every partition up to it is trained)", float(lag))
    yield _gauge("stream_partitions_waiting", "Partitions of the stream appended but not "
                 "trained through yet", float(stream.get("waiting") or 0))
    yield _counter("stream_partitions", "Partitions of the stream appended to the queue",
                   float(stream.get("partitions") or 0))
    yield _gauge("stream_idle", "1 while the trainers wait for the stream's next partition",
                 1.0 if stream.get("waiting_for_data") else 0.0)
    yield _gauge("stream_refused", "1 while the stream stops at a partition it refuses (the "
                 "status page says why)", 1.0 if stream.get("refused") else 0.0)


def _progressive(scores: Any) -> Iterable[Metric]:
    """The newest final partition's progressive AUC (the status document's ``progressive``)."""
    final = [s for s in scores or [] if isinstance(s, dict) and s.get("final")
             and isinstance(s.get("auc"), int | float)]
    if final:
        yield _gauge("stream_progressive_auc", "AUC of the stream's newest trained partition, "
                     "scored by the model before it trained on it", float(final[-1]["auc"]))


def _rows(doc: dict[str, Any]) -> Iterable[Metric]:
    """The page's rows: per pserver slot whether it is held and its restarts, per trainer
    index its restarts (both carried from leader to leader in the page's memory)."""
    pservers = [row for row in doc.get("pservers") or [] if isinstance(row, dict)
                and isinstance(row.get("shard"), int)]
    if pservers:
        up = GaugeMetricFamily("elasticps_master_pserver_up", "1 while a pserver holds the "
                               "slot of the shard", labels=["shard"])
        restarts = CounterMetricFamily("elasticps_master_pserver_restarts", "Times the "
                                       "shard's slot was taken by a new process",
                                       labels=["shard"])
        for row in pservers:
            up.add_metric([str(row["shard"])], 1.0 if row.get("up") else 0.0)
            restarts.add_metric([str(row["shard"])], float(row.get("restarts") or 0))
        yield up
        yield restarts
    trainers = [(trainer_index(str(row.get("name"))), row) for row in doc.get("trainers") or []
                if isinstance(row, dict)]
    known = [(index, row) for index, row in trainers if index is not None]
    if known:
        family = CounterMetricFamily("elasticps_master_trainer_restarts", "Times the trainer "
                                     "index came back as a new process", labels=["trainer"])
        for index, row in known:
            family.add_metric([str(index)], float(row.get("restarts") or 0))
        yield family


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"elasticps_master_{name}", help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"elasticps_master_{name}", help_text, value=value)


class TimedMasterServicer(MasterServicer):
    """The Master servicer with the latency of the calls that hand out tasks observed."""

    def __init__(self, state: MasterState, dispatch: Histogram) -> None:
        super().__init__(state)
        self._dispatch = dispatch

    def GetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.GetTaskRequest, context: grpc.ServicerContext,
    ) -> master_pb2.GetTaskResponse:
        started = time.perf_counter()
        try:
            return super().GetTask(request, context)
        finally:
            self._dispatch.observe(time.perf_counter() - started)

    def FinishAndGetTask(  # noqa: N802 - gRPC's method name
        self, request: master_pb2.FinishAndGetTaskRequest, context: grpc.ServicerContext,
    ) -> master_pb2.FinishAndGetTaskResponse:
        started = time.perf_counter()
        try:
            return super().FinishAndGetTask(request, context)
        finally:
            self._dispatch.observe(time.perf_counter() - started)
