"""The server's Prometheus metrics (``GET /metrics``), every series labelled ``role="serve"``.

=========================================== ========= ===========================================
``elasticps_serve_requests_total``          counter   requests by ``path`` and ``code``
``elasticps_serve_request_seconds``         histogram ``POST /score`` latency, read to written
``elasticps_serve_rows_total``              counter   rows scored
``elasticps_serve_model_version``           gauge     the version answers use now (0: none yet)
``elasticps_serve_model_age_seconds``       gauge     now - the loaded version's commit time
``elasticps_serve_freshness_seconds``       histogram per version: its commit to the first
                                                      answer that used it
``elasticps_serve_version_load_seconds``    histogram reading, applying and building a version
``elasticps_serve_version_load_failures_total`` counter versions that could not be loaded
=========================================== ========= ===========================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from elasticps.serve.scoring import LoadedVersion
from elasticps.telemetry.exporter import PREFIX, new_registry

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FRESHNESS_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _VersionCollector(Collector):
    """The loaded version and its age, read at each scrape."""

    def __init__(self, current: Callable[[], LoadedVersion | None],
                 wall: Callable[[], float]) -> None:
        self.current = current
        self.wall = wall

    def collect(self) -> Iterable[Metric]:
        loaded = self.current()
        version = GaugeMetricFamily(f"{PREFIX}serve_model_version",
                                    "The model version answers use now (0: none loaded)")
        version.add_metric([], float(loaded.version if loaded else 0))
        yield version
        if loaded is not None:
            age = GaugeMetricFamily(f"{PREFIX}serve_model_age_seconds",
                                    "Seconds since the loaded version's training position "
                                    "was committed")
            age.add_metric([], self.wall() - loaded.record.committed_at)
            yield age


class ServeMetrics:
    """The metrics of one server (module docstring)."""

    def __init__(self, current: Callable[[], LoadedVersion | None],
                 wall: Callable[[], float] = time.time) -> None:
        self.registry = new_registry({"role": "serve"})
        self.requests = Counter(f"{PREFIX}serve_requests", "HTTP requests answered",
                                ["path", "code"], registry=self.registry)
        self.latency = Histogram(f"{PREFIX}serve_request_seconds", "POST /score latency",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.rows = Counter(f"{PREFIX}serve_rows", "Rows scored", registry=self.registry)
        self.freshness = Histogram(f"{PREFIX}serve_freshness_seconds",
                                   "Per version, seconds from its training position's commit "
                                   "to the first answer that used it",
                                   buckets=FRESHNESS_BUCKETS, registry=self.registry)
        self.load = Histogram(f"{PREFIX}serve_version_load_seconds",
                              "Seconds to read, apply and build a new version",
                              buckets=LOAD_BUCKETS, registry=self.registry)
        self.load_failures = Counter(f"{PREFIX}serve_version_load_failures",
                                     "Versions that could not be loaded",
                                     registry=self.registry)
        self.registry.register(_VersionCollector(current, wall))

    def text(self) -> bytes:
        return generate_latest(self.registry)
