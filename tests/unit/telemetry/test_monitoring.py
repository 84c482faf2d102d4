"""The monitoring elasticps ships (elasticps/telemetry/monitoring/, deploy/monitoring/):
Debian's promtool checks the rules and unit-tests every alert on synthetic series
(promtool_rules_test.yml); every metric the dashboard and the rules read is one the roles
serve; the PodMonitor selects the pods the renderers make; ``elasticps monitoring export``.

A real Prometheus evaluating them against a real job: tests/integration/telemetry/
test_prometheus_alerts.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from prometheus_client import CollectorRegistry

from elasticps.cli import main
from elasticps.cluster.manifests import BACKENDS, render
from elasticps.cluster.spec import Job
from elasticps.master.telemetry import MasterMetrics
from elasticps.proto import pserver_pb2
from elasticps.pserver.shard import ShardState
from elasticps.pserver.telemetry import CheckpointClock, PServerMetrics
from elasticps.rpc.call_metrics import ClientCallMetrics, ServerCallMetrics
from elasticps.telemetry.exporter import exposition
from elasticps.telemetry.monitoring_files import FILES, read
from elasticps.telemetry.role import RoleTelemetry
from elasticps.trainer.step_worker import LoopStats
from elasticps.trainer.telemetry import register_trainer_metrics
from tests.helpers import REPO

MONITORING = REPO / "elasticps/telemetry/monitoring"
UNIT_TEST = Path(__file__).parent / "promtool_rules_test.yml"
# a metric name: not a label matched (grpc_code="OK") or grouped by (by/on/ignoring (...))
METRIC = re.compile(r"\b((?:elasticps|grpc)_[a-z0-9_]+)\b(?!\s*[=!])")
GROUPING = re.compile(r"\b(?:by|on|ignoring|without)\s*\([^)]*\)")


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: apt-get install -y prometheus "
                    "(scripts/setup.sh does this)")
    return path


def rules(name: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load(read(name))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(read("grafana-dashboard.json"))
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def test_promtool_checks_the_rule_files(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", str(MONITORING / "recording-rules.yml"),
                           str(MONITORING / "alert-rules.yml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout
    assert "SUCCESS: 5 rules found" in done.stdout


def test_promtool_unit_tests_every_alert_on_synthetic_series(promtool: str) -> None:
    done = subprocess.run([promtool, "test", "rules", str(UNIT_TEST)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {case["alertname"] for test in yaml.safe_load(UNIT_TEST.read_text())["tests"]
              for case in test.get("alert_rule_test", [])}
    alerts = {rule["alert"] for rule in rules("alert-rules.yml")}
    assert alerts == {"ElasticPSJobFailed", "ElasticPSNoProgress", "ElasticPSCheckpointStale",
                      "ElasticPSPServerDown", "ElasticPSProgressiveAUCDrop"}
    assert tested == alerts
    for rule in rules("alert-rules.yml"):
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description"} <= set(rule["annotations"])


def served_metric_names() -> set[str]:
    """Every sample name the three roles serve, from their real collectors."""
    names: set[str] = set()
    doc: dict[str, Any] = {
        "leader": True, "state": "running", "pass": 0, "num_passes": 2, "num_tasks": 4,
        "counts": {"todo": 4}, "progress": {"fraction": 0.0}, "records_total": 0,
        "tasks_finished_total": 0, "failures_total": 0, "recoveries_total": 0,
        "failovers_total": 0, "reconciling": False, "live_trainers": ["trainer-0-h-1"],
        "pservers": [{"shard": 0, "up": True, "restarts": 0}],
        "trainers": [{"name": "trainer-0", "restarts": 0}],
        "progressive": [{"partition": "dt=2026-12-01", "auc": 0.7, "final": True}]}
    master = RoleTelemetry("j", "master", "m")
    MasterMetrics(master.registry, lambda: doc)
    ServerCallMetrics(master.registry).handled.labels("s", "m", "OK").inc()
    ClientCallMetrics(master.registry).handled.labels("s", "m", "OK", "0").inc()
    pserver = RoleTelemetry("j", "pserver", "pserver-0", shard="0")
    shard = ShardState(0, 1)
    shard.declare([pserver_pb2.TableSpec(
        name="emb", kind=pserver_pb2.TableSpec.SPARSE, dim=2,
        optimizer=pserver_pb2.OptimizerSpec(kind=pserver_pb2.OptimizerSpec.SGD, lr=0.1))])
    shard.pull_sparse("emb", np.array([1], dtype=np.int64))
    metrics = PServerMetrics(pserver.registry, lambda: shard,
                             CheckpointClock(interval_s=60.0, last_unix=1.0, current_unix=1.0))
    metrics.rpc.labels("Push").observe(0.001)
    trainer = RoleTelemetry("j", "trainer", "trainer-0-h-1", trainer="0")
    runner = SimpleNamespace(timers={"forward": 1.0}, staleness=0, staleness_sum=0,
                             dense_chain=None)
    training = SimpleNamespace(stats=LoopStats(samples=1, batches=1, loss_ewma=0.5),
                               runner=runner)
    register_trainer_metrics(trainer.registry, lambda: training)
    registries: list[CollectorRegistry] = [master.registry, pserver.registry, trainer.registry]
    for registry in registries:
        for family in registry.collect():
            names.update(sample.name for sample in family.samples)
        assert exposition(registry)
    return names


def test_every_metric_the_dashboard_and_the_rules_read_is_served() -> None:
    served = served_metric_names()
    texts = dashboard_exprs() + [rule["expr"] for name in ("recording-rules.yml",
                                                           "alert-rules.yml")
                                 for rule in rules(name)]
    read_names = {name for text in texts for name in METRIC.findall(GROUPING.sub("", text))}
    assert read_names - served == set()
    assert {"elasticps_master_job_state", "elasticps_trainer_samples_total",
            "elasticps_pserver_rpc_seconds_bucket", "grpc_server_handled_total",
            "grpc_client_handled_total"} <= read_names


def test_the_dashboard_shows_what_a_person_asks_of_a_job() -> None:
    doc = json.loads(read("grafana-dashboard.json"))
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])
    titles = {p["title"] for p in panels}
    assert {"Job state", "Samples/s per trainer", "Training loss", "Pull and push p99 per shard",
            "Checkpoint age per shard", "Restarts", "Tasks of the pass by state"} <= titles
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["job"]["definition"] == "label_values(elasticps_process_info, job)"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], panel["title"]


def test_the_podmonitor_selects_every_roles_pods_as_the_renderers_make_them() -> None:
    monitor = yaml.safe_load(read("podmonitor.yml"))
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    selector = monitor["spec"]["selector"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True  # the processes' job, role, shard, trainer stay
    sources = {r["targetLabel"]: r["sourceLabels"][0] for r in endpoint["relabelings"]}
    job = Job.from_dict({"job_name": "ctr-mon", "namespace": "ml", "trainers": 2,
                         "entry_point": "python train.py"})
    for backend in BACKENDS:
        pods = [template for obj in render(job, backend) for template in _templates(obj)]
        roles = set()
        for pod in pods:
            labels = pod["metadata"]["labels"]
            if not _selects(selector, labels):
                continue
            roles.add(labels["elasticps.io/role"])
            ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
            assert endpoint["port"] in ports
            assert _meta(sources["job"], labels) == "ctr-mon"
            assert _meta(sources["role"], labels) == labels["elasticps.io/role"]
        assert roles == {"master", "pserver", "trainer"}, backend


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("apiVersion") == "batch.volcano.sh/v1alpha1":
        return [task["template"] for task in obj["spec"]["tasks"]]
    if obj.get("kind") in ("Deployment", "StatefulSet", "Job"):
        return [obj["spec"]["template"]]
    return []


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", [])
               if e["operator"] == "In")


def _meta(source: str, labels: dict[str, str]) -> str | None:
    """What kubernetes_sd puts in ``__meta_kubernetes_pod_label_<name>`` for these labels."""
    by_meta = {"__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
               for k, v in labels.items()}
    return by_meta.get(source)


def test_monitoring_export_writes_the_files_and_keeps_a_changed_one(tmp_path: Path,
                                                                    capsys: Any) -> None:
    target = tmp_path / "mon"
    assert main(["monitoring", "export", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(FILES)
    for name in FILES:
        assert (target / name).read_text() == read(name) == (MONITORING / name).read_text()
        assert (REPO / "deploy/monitoring" / name).read_text() == read(name)
    assert str(target / "podmonitor.yml") in capsys.readouterr().out
    assert main(["monitoring", "export", str(target)]) == 0  # the same files: nothing to keep

    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "alert-rules.yml").write_text("# mine\n")
    assert main(["monitoring", "export", str(edited)]) == 1
    assert "alert-rules.yml already exist(s) with other content" in capsys.readouterr().err
    assert sorted(p.name for p in edited.iterdir()) == ["alert-rules.yml"]  # nothing written
    assert (edited / "alert-rules.yml").read_text() == "# mine\n"
    assert main(["monitoring", "export", "--overwrite", str(edited)]) == 0
    assert (edited / "alert-rules.yml").read_text() == read("alert-rules.yml")

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["monitoring", "export", str(a_file)]) == 1
    assert f"{a_file} exists and is not a directory" in capsys.readouterr().err
    assert a_file.read_text() == "x"
