"""The pserver's Prometheus metrics.

Read at scrape time from the shard (no cost on the push path): per table
``elasticps_pserver_table_rows`` (the rows a sparse table holds),
``elasticps_pserver_dense_values`` (the values of a dense table's part this shard holds) and
``elasticps_pserver_table_bytes`` (either kind, optimizer state included);
``elasticps_pserver_pushes_total``,
``elasticps_pserver_duplicates_total`` (pushes of an already-applied batch, refused),
``elasticps_pserver_skipped_nonfinite_total``, ``elasticps_pserver_applied_batches``,
``elasticps_pserver_pushes_per_second`` (last 10 s), ``elasticps_pserver_initialized``,
``elasticps_pserver_checkpoint_age_seconds``,
``elasticps_pserver_last_checkpoint_timestamp_seconds``,
``elasticps_pserver_checkpoint_lag_seconds`` (since a checkpoint last held everything the
shard holds: written, or found up to date by the checkpoint loop, which writes nothing when
nothing changed; so it stays below the interval plus one write while checkpoints work, on an
idle shard too), ``elasticps_pserver_checkpoint_interval_seconds`` and
``elasticps_pserver_restore_seconds`` (how long restoring the checkpoint took at start). The
shard is a label of every series (``shard``), not a value.
Observed as they happen: ``elasticps_pserver_rpc_seconds{method}`` for PullDense, PullSparse
and Push (its count is the pull and push rate) and ``elasticps_pserver_checkpoint_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from elasticps.proto import pserver_pb2
from elasticps.pserver.service import CheckpointNow, ParameterServerServicer
from elasticps.pserver.shard import ShardState, ShardStats
from elasticps.telemetry.exporter import CallbackCollector

_RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                0.5, 1.0)
_CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class CheckpointClock:
    """When the last checkpoint was written, when a checkpoint last held the whole shard, and
    how long restoring took (unix seconds)."""

    interval_s: float | None = None  # PADDLE_CHECKPOINT_INTERVAL
    last_unix: float | None = None
    current_unix: float | None = None  # written, found up to date, or restored
    restore_s: float | None = None


class PServerMetrics:
    """The pserver's histograms and its scrape-time collector over the shard."""

    def __init__(self, registry: CollectorRegistry, shard: Callable[[], ShardState | None],
                 clock: CheckpointClock) -> None:
        self.rpc = Histogram("elasticps_pserver_rpc_seconds", "Time to serve a pull or a push",
                             ["method"], buckets=_RPC_BUCKETS, registry=registry)
        self.checkpoint = Histogram("elasticps_pserver_checkpoint_seconds", "Time to write one "
                                    "checkpoint (snapshot, data, manifest, publish)",
                                    buckets=_CHECKPOINT_BUCKETS, registry=registry)
        self._shard = shard
        self.clock = clock
        registry.register(CallbackCollector(self._collect))

    def _collect(self) -> Iterable[Metric]:
        clock, now = self.clock, time.time()
        if clock.last_unix is not None:
            yield _gauge("checkpoint_age_seconds", "Seconds since the last checkpoint was written",
                         max(0.0, now - clock.last_unix))
            yield _gauge("last_checkpoint_timestamp_seconds", "When the last checkpoint was "
                         "written (unix time)", clock.last_unix)
        if clock.current_unix is not None:
            yield _gauge("checkpoint_lag_seconds", "Seconds since a checkpoint last held "
                         "everything this shard holds", max(0.0, now - clock.current_unix))
        if clock.interval_s is not None:
            yield _gauge("checkpoint_interval_seconds", "Seconds between two checks of the "
                         "checkpoint loop (PADDLE_CHECKPOINT_INTERVAL)", clock.interval_s)
        if clock.restore_s is not None:
            yield _gauge("restore_seconds", "Time restoring the newest checkpoint took at start",
                         clock.restore_s)
        shard = self._shard()
        if shard is None:
            return
        stats = shard.stats()
        yield from _tables(stats)
        yield _counter("pushes", "Pushes applied", float(stats.pushes))
        yield _counter("duplicates", "Pushes of an already-applied batch, refused",
                       float(stats.duplicates))
        yield _counter("skipped_nonfinite", "Pushes skipped for NaN or Inf gradients",
                       float(stats.skipped_nonfinite))
        yield _gauge("applied_batches", "Batches recorded as applied (not yet pruned)",
                     float(stats.applied_batches))
        yield _gauge("pushes_per_second", "Pushes applied per second over the last 10 s",
                     stats.pushes_per_sec)
        yield _gauge("initialized", "1 once the shard's tables are initialised",
                     1.0 if stats.initialized else 0.0)


def _tables(stats: ShardStats) -> Iterable[Metric]:
    rows = GaugeMetricFamily("elasticps_pserver_table_rows", "Rows of each sparse table held "
                             "by this shard", labels=["table"])
    values = GaugeMetricFamily("elasticps_pserver_dense_values", "Values of each dense table's "
                               "part held by this shard", labels=["table"])
    size = GaugeMetricFamily("elasticps_pserver_table_bytes", "Bytes of each table (values "
                             "and optimizer state) held by this shard", labels=["table"])
    for name, count, nbytes in stats.tables:
        (rows if name in stats.sparse else values).add_metric([name], float(count))
        size.add_metric([name], float(nbytes))
    yield rows
    yield values
    yield size


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"elasticps_pserver_{name}", help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"elasticps_pserver_{name}", help_text, value=value)


class TimedServicer(ParameterServerServicer):
    """The ParameterServer servicer with pulls and pushes timed (a few microseconds each)."""

    def __init__(self, state: ShardState, incarnation: str, last_checkpoint: Callable[[], str],
                 checkpoint_now: CheckpointNow | None, *, rpc: Histogram) -> None:
        super().__init__(state, incarnation, last_checkpoint, checkpoint_now)
        self._pull_dense = rpc.labels("PullDense")
        self._pull_sparse = rpc.labels("PullSparse")
        self._push = rpc.labels("Push")

    def PullDense(  # noqa: N802 (gRPC method names)
        self, request: pserver_pb2.PullDenseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PullDenseResponse:
        started = time.perf_counter()
        try:
            return super().PullDense(request, context)
        finally:
            self._pull_dense.observe(time.perf_counter() - started)

    def PullSparse(  # noqa: N802
        self, request: pserver_pb2.PullSparseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PullSparseResponse:
        started = time.perf_counter()
        try:
            return super().PullSparse(request, context)
        finally:
            self._pull_sparse.observe(time.perf_counter() - started)

    def Push(  # noqa: N802
        self, request: pserver_pb2.PushRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PushResponse:
        started = time.perf_counter()
        try:
            return super().Push(request, context)
        finally:
            self._push.observe(time.perf_counter() - started)
