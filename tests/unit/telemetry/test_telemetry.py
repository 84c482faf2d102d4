"""The shared telemetry: an exporter per process, its published endpoint, log lines, the page's
HTTP server; and every role's collectors, parsed back with prometheus_client's parser."""

from __future__ import annotations

import io
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from prometheus_client import Gauge
from prometheus_client.parser import text_string_to_metric_families

from elasticps.master.status_logs import LogFiles
from elasticps.master.status_page import StatusServer
from elasticps.master.telemetry import MasterMetrics
from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.pserver.telemetry import CheckpointClock, PServerMetrics
from elasticps.store import Store, open_store
from elasticps.store.keys import MetricsEndpoint, metrics_key, read_metrics_endpoints
from elasticps.telemetry import logfmt
from elasticps.telemetry.endpoint import EndpointPublication
from elasticps.telemetry.exporter import exposition
from elasticps.telemetry.role import RoleTelemetry
from elasticps.trainer.step_worker import LoopStats
from elasticps.trainer.telemetry import register_trainer_metrics
from elasticps.version import __version__


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


def parsed(text: bytes | str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    raw = text.decode() if isinstance(text, bytes) else text
    for family in text_string_to_metric_families(raw):
        out[family.name] = [(s.name, dict(s.labels), s.value) for s in family.samples]
    return out


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, "", b""


def test_a_role_serves_its_registry_and_publishes_where(store: Store) -> None:
    node = f"pserver-h-{os.getpid()}"
    telemetry = RoleTelemetry("job-a", "pserver", node)
    url = telemetry.start("127.0.0.1", 0)
    try:
        telemetry.publish(store, ttl=5)
        assert read_metrics_endpoints(store) == [MetricsEndpoint("pserver", node, url)]
        before = parsed(fetch(url)[2])
        assert before["elasticps_process_info"] == [
            ("elasticps_process_info", {"job": "job-a", "role": "pserver",
                                        "version": __version__}, 1.0)]
        telemetry.rename("pserver-0", shard="0")
        assert [e.name for e in read_metrics_endpoints(store)] == ["pserver-0"]
        status, kind, body = fetch(url)
        assert status == 200
        assert kind.startswith("text/plain")
        families = parsed(body)
        assert families["elasticps_process_info"] == [
            ("elasticps_process_info", {"job": "job-a", "role": "pserver", "shard": "0",
                                        "version": __version__}, 1.0)]
        assert "process_cpu_seconds" in families
        # every series names the job, the role and the shard, and none the process
        samples = [labels for family in families.values() for _, labels, _ in family]
        assert samples
        assert all(labels["job"] == "job-a" and labels["role"] == "pserver"
                   and labels["shard"] == "0" for labels in samples)
        assert not [labels for labels in samples
                    if any(str(os.getpid()) in value for value in labels.values())]
        # a restricted scrape (Prometheus' name[] filter) labels its series too
        _, _, body = fetch(url + "?name[]=process_cpu_seconds_total")
        assert [labels for _, labels, _ in parsed(body)["process_cpu_seconds"]] == [
            {"job": "job-a", "role": "pserver", "shard": "0"}]
    finally:
        telemetry.close()
    assert read_metrics_endpoints(store) == []  # the lease went with it


def test_identity_labels_must_be_label_names_and_a_metrics_own_label_wins() -> None:
    with pytest.raises(ValueError, match="'bad-name' is not a Prometheus label name"):
        RoleTelemetry("j", "trainer", "t", **{"bad-name": "1"})
    telemetry = RoleTelemetry("j", "trainer", "trainer-0-h-1", trainer="0", shard="7")
    gauge = Gauge("elasticps_test_called", "a metric with its own shard", ["shard"],
                  registry=telemetry.registry)
    gauge.labels("2").set(1)
    assert parsed(exposition(telemetry.registry))["elasticps_test_called"] == [
        ("elasticps_test_called", {"job": "j", "role": "trainer", "trainer": "0",
                                   "shard": "2"}, 1.0)]
    telemetry.registry.unregister(gauge)
    assert "elasticps_test_called" not in parsed(exposition(telemetry.registry))


def test_an_endpoint_comes_back_after_its_lease_expired(store: Store) -> None:
    endpoint = MetricsEndpoint("trainer", "t-0", "http://127.0.0.1:1/metrics")
    publication = EndpointPublication(store, endpoint, ttl=1, check_s=0.05).start()
    try:
        first = store.get(metrics_key("trainer", "t-0"))
        assert first is not None
        lease = publication._lease
        assert lease is not None
        lease.revoke()  # what an expiry during a store outage leaves: no key, a dead lease
        assert store.get(metrics_key("trainer", "t-0")) is None
        from tests.helpers import wait_for

        wait_for(lambda: store.get(metrics_key("trainer", "t-0")), 10,
                 what="the endpoint published again")
    finally:
        publication.stop()


def test_log_lines_name_job_role_and_node_as_text_or_json() -> None:
    record = logging.LogRecord("elasticps.x", logging.INFO, __file__, 1, "hello %s", ("w",),
                               None)
    logfmt.set_context(job="ctr-1", role="pserver", node="pserver-3")
    logfmt.ContextFilter().filter(record)
    text = logging.Formatter(logfmt.TEXT_FORMAT).format(record)
    assert "INFO [job ctr-1 role pserver node pserver-3] elasticps.x: hello w" in text
    doc = json.loads(logfmt.JsonFormatter().format(record))
    assert {k: doc[k] for k in ("level", "job", "role", "node", "logger", "message")} == {
        "level": "INFO", "job": "ctr-1", "role": "pserver", "node": "pserver-3",
        "logger": "elasticps.x", "message": "hello w"}
    assert logfmt.process_node("trainer", 4).startswith("trainer-4-")
    assert logfmt.process_node("master").startswith("master-")


def test_the_status_server_serves_the_page_its_assets_json_and_metrics() -> None:
    server = StatusServer(lambda: {"job": "j", "state": "running", "loss": float("nan")},
                          "127.0.0.1", 0,
                          metrics=lambda: b"# HELP x y\n# TYPE x gauge\nx 1.0\n")
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, kind, body = fetch(base + "/")
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert b'src="static/app.js"' in body  # relative: it works behind a proxy's path
        assert b"http" not in body.replace(b"http://www.w3.org", b"")  # nothing from elsewhere
        for path in ("/static/app.js", "/static/style.css"):
            status, _, body = fetch(base + path)
            assert status == 200
            assert len(body) > 1000
            assert b"//cdn" not in body
        assert json.loads(fetch(base + "/api/status")[2]) == {"job": "j", "state": "running",
                                                              "loss": None}
        assert parsed(fetch(base + "/metrics")[2])["x"] == [("x", {}, 1.0)]
        assert fetch(base + "/static/../../etc/passwd")[0] == 404
    finally:
        server.stop()


def test_the_status_server_shows_a_local_jobs_role_logs_and_nothing_else(
        tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "trainer-1.log").write_text("".join(f"line {i}\n" for i in range(500)))
    (logs / "master.log").write_text("elected\n")
    (logs / "notes.log").write_text("not a role's\n")
    (tmp_path / "secret.log").write_text("token\n")
    server = StatusServer(dict, "127.0.0.1", 0, logs=LogFiles(logs))
    server.start()
    base = f"http://127.0.0.1:{server.port}/api/logs"
    try:
        assert json.loads(fetch(base)[2]) == {"logs": ["master", "trainer-1"]}
        status, kind, body = fetch(base + "/trainer-1")
        assert (status, kind) == (200, "text/plain; charset=utf-8")
        assert body.decode().splitlines() == [f"line {i}" for i in range(300, 500)]
        for name in ("notes", "../secret", "..%2Fsecret", "trainer-2", "master.log", ""):
            assert fetch(f"{base}/{name}")[0] == 404, name
    finally:
        server.stop()
    bare = StatusServer(dict, "127.0.0.1", 0)  # a cluster master: no log directory
    bare.start()
    try:
        assert json.loads(fetch(f"http://127.0.0.1:{bare.port}/api/logs")[2]) == {"logs": []}
    finally:
        bare.stop()


def test_master_metrics_are_read_from_the_status_document() -> None:
    telemetry = RoleTelemetry("j", "master", "m")
    doc: dict[str, Any] = {"leader": True, "state": "running", "pass": 1, "num_passes": 3,
                           "num_tasks": 10, "counts": {"todo": 5, "pending": 1, "done": 3,
                                                       "failed": 1},
                           "records_total": 900, "tasks_finished_total": 13,
                           "failures_total": 2, "recoveries_total": 1, "reconciling": False,
                           "live_trainers": ["a", "b"], "progress": {"fraction": 0.4},
                           "failovers_total": 1,
                           "pservers": [{"shard": 0, "up": True, "restarts": 0},
                                        {"shard": 1, "up": False, "restarts": 2}],
                           "trainers": [{"name": "trainer-0", "restarts": 1},
                                        {"name": "trainer-3", "restarts": 0},
                                        {"name": "someone-else", "restarts": 9}]}
    metrics = MasterMetrics(telemetry.registry, lambda: doc)
    metrics.dispatch.observe(0.002)
    metrics.store_write.observe(0.001)
    families = parsed(exposition(telemetry.registry))

    def by(name: str, label: str) -> dict[str, float]:
        return {labels[label]: v for _, labels, v in families[name]}

    assert by("elasticps_master_tasks", "state") == {"todo": 5, "pending": 1, "done": 3,
                                                     "failed": 1}
    assert by("elasticps_master_job_state", "state") == {
        "waiting_for_dataset": 0, "running": 1, "succeeded": 0, "failed": 0}
    assert families["elasticps_master_pass"][0][2] == 2  # the second pass, as the page shows
    assert families["elasticps_master_pass_progress_ratio"][0][2] == pytest.approx(0.4)
    assert families["elasticps_master_job_progress_ratio"][0][2] == pytest.approx(0.4)
    assert families["elasticps_master_failovers"][0][2] == 1
    assert families["elasticps_master_leader"][0][2] == 1
    assert families["elasticps_master_live_trainers"][0][2] == 2
    assert by("elasticps_master_pserver_up", "shard") == {"0": 1, "1": 0}
    assert by("elasticps_master_pserver_restarts", "shard") == {"0": 0, "1": 2}
    assert by("elasticps_master_trainer_restarts", "trainer") == {"0": 1, "3": 0}
    count = {n: v for n, _, v in families["elasticps_master_dispatch_seconds"]}
    assert count["elasticps_master_dispatch_seconds_count"] == 1
    assert all(labels["job"] == "j" and labels["role"] == "master"
               for family in families.values() for _, labels, _ in family)
    doc.update(state="failed", **{"pass": 0})
    families = parsed(exposition(telemetry.registry))
    assert by("elasticps_master_job_state", "state")["failed"] == 1
    assert sum(by("elasticps_master_job_state", "state").values()) == 1
    assert families["elasticps_master_pass"][0][2] == 1  # 1 during the first pass
    standby = parsed(exposition(RoleTelemetry("j", "master", "standby").registry))
    assert "elasticps_master_job_state" not in standby


def test_pserver_metrics_are_read_from_the_shard() -> None:
    telemetry = RoleTelemetry("j", "pserver", "pserver-0", shard="0")
    shard = ShardState(0, 1)
    sgd = pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.SGD, lr=0.1)
    shard.declare([pserver_pb2.TableSpec(name="emb", kind=pserver_pb2.TableSpec.SPARSE, dim=4,
                                         optimizer=sgd),
                   pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE,
                                         shape=[5, 2], optimizer=sgd)])
    shard.init_dense({"w": np.zeros(10, dtype=np.float32)})  # the flat slice
    ids = np.array([1, 2, 3], dtype=np.int64)
    shard.pull_sparse("emb", ids)
    grads = np.ones((3, 4), dtype=np.float32)
    shard.push(BatchKey(0, 0, 0), {}, {"emb": (ids, grads)})
    shard.push(BatchKey(0, 0, 0), {}, {"emb": (ids, grads)})  # a duplicate, refused
    now = time.time()
    clock = CheckpointClock(interval_s=60.0, last_unix=1.0, current_unix=now - 30,
                            restore_s=0.25)
    PServerMetrics(telemetry.registry, lambda: shard, clock)
    families = parsed(exposition(telemetry.registry))
    identity = {"job": "j", "role": "pserver", "shard": "0"}
    assert families["elasticps_pserver_table_rows"] == [
        ("elasticps_pserver_table_rows", {**identity, "table": "emb"}, 3.0)]  # sparse only
    assert families["elasticps_pserver_dense_values"] == [
        ("elasticps_pserver_dense_values", {**identity, "table": "w"}, 10.0)]
    assert {labels["table"] for _, labels, _ in families["elasticps_pserver_table_bytes"]} == {
        "emb", "w"}
    assert families["elasticps_pserver_pushes"][0][2] == 1
    assert families["elasticps_pserver_duplicates"][0][2] == 1
    assert families["elasticps_pserver_restore_seconds"][0][2] == 0.25
    assert families["elasticps_pserver_checkpoint_age_seconds"][0][2] > 1e9
    assert families["elasticps_pserver_checkpoint_lag_seconds"][0][2] == pytest.approx(30, abs=5)
    assert families["elasticps_pserver_checkpoint_interval_seconds"][0][2] == 60
    assert "elasticps_pserver_shard" not in families  # the shard is a label, not a value


class FakeRunner:
    timers = {"forward": 1.5, "backward": 2.0, "pull_wait": 0.5, "push_wait": 0.25}
    staleness = 1
    staleness_sum = 40
    dense_chain = SimpleNamespace(skipped=39)


class FakeTraining:
    def __init__(self) -> None:
        self.stats = LoopStats(samples=640, batches=40, tasks=2, loss_ewma=0.5, pass_id=1,
                               pass_metrics=[{"test_auc": 0.75, "cost": float("nan")}],
                               samples_per_s=320.0)
        self.runner: Any = FakeRunner()


def test_trainer_metrics_are_read_from_the_step_runner_and_the_worker() -> None:
    telemetry = RoleTelemetry("j", "trainer", "trainer-0-h-1", trainer="0")
    training: list[FakeTraining] = []
    register_trainer_metrics(telemetry.registry, lambda: training[0] if training else None)
    assert "elasticps_trainer_samples" not in parsed(exposition(telemetry.registry))
    training.append(FakeTraining())
    families = parsed(exposition(telemetry.registry))
    assert families["elasticps_trainer_samples"][0][2] == 640
    assert families["elasticps_trainer_samples"][0][1] == {"job": "j", "role": "trainer",
                                                          "trainer": "0"}
    assert families["elasticps_trainer_pass"][0][2] == 2  # pass_id 1: the second pass
    assert families["elasticps_trainer_samples_per_second"][0][2] == 320
    phases = {labels["phase"]: v for _, labels, v in
              families["elasticps_trainer_step_phase_seconds"]}
    assert phases == FakeRunner.timers
    assert families["elasticps_trainer_staleness_batches"][0][2] == 1
    assert families["elasticps_trainer_dense_pulls_skipped"][0][2] == 39
    assert families["elasticps_trainer_pass_metric"] == [
        ("elasticps_trainer_pass_metric", {"job": "j", "role": "trainer", "trainer": "0",
                                           "metric": "test_auc"}, 0.75)]  # NaN left out


def test_json_logging_is_configured_for_the_root_logger() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved, level, context = list(root.handlers), root.level, logfmt.context()
    try:
        logfmt.configure(logging.INFO, "json", job="j", role="trainer", node="trainer-0-h-1")
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        logging.getLogger("elasticps.t").info("ready")
        assert json.loads(stream.getvalue())["node"] == "trainer-0-h-1"
        with pytest.raises(ValueError, match="xml"):
            logfmt.configure(logging.INFO, "xml")
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
        logfmt.set_context(**context)
