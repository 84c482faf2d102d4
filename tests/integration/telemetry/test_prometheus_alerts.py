"""The shipped rules and dashboard against a real Prometheus scraping a real job.

Debian's Prometheus (a free loopback port, a temporary data directory) scrapes every metrics
endpoint the job's processes published in the store (written as file_sd targets), and
evaluates the shipped recording and alert rules. The job (``elasticps run``: a master, two
pservers, a trainer; scripts/alerting_job.py) trains pass 0, stalls at its end, then fails: the
test truncates every data file, and the trainers' reports of unreadable tasks make the master
fail the job.

Checked: every PromQL expression of the Grafana dashboard parses and returns a series (the
throughput, the p99 per shard, the checkpoint age...); every series carries the job's name and
no process name; ElasticPSNoProgress fires once the job stalled (and was not active since
before training began); ElasticPSPServerDown fires for the shard whose pserver is frozen past
its lease; ElasticPSJobFailed fires once the master failed the job.

The rules are the shipped ones with their durations shrunk (:func:`quick`): every minute of a
``for:`` or a range window becomes 0.4 s, windows at least 3 s (six scrapes at 0.5 s), so
"no progress for 15 minutes" is 6 s here. About 30 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from elasticps.data import open_dataset
from elasticps.data.synth import synth_ctr
from elasticps.launch.process_records import ProcessRecords
from elasticps.store import open_store
from elasticps.store.keys import MetricsEndpoint, read_metrics_endpoints
from elasticps.telemetry.monitoring_files import read
from tests.helpers import REPO, kill_quietly, wait_for
from tests.prometheus_server import Prometheus

SCRIPT = REPO / "tests/integration/telemetry/scripts/alerting_job.py"
JOB = "alerting-1"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
       "PYTHONPATH": str(REPO), "PADDLE_LEASE_TTL": "2", "PADDLE_CHECKPOINT_INTERVAL": "1"}
ROLES = {"master": 1, "pserver": 2, "trainer": 1}
ROWS = 8000  # pass 0 takes a few scrapes


def quick(rules: str) -> str:
    """The test's copy of a rule file: a minute of ``for:`` or of a range window is 0.4 s, a
    window at least 3 s (so rate() and increase() see six scrapes)."""
    rules = re.sub(r"\[(\d+)m\]", lambda m: f"[{max(3000, int(m[1]) * 400)}ms]", rules)
    return re.sub(r"for: (\d+)m", lambda m: f"for: {int(m[1]) * 400}ms", rules)


def scrape_config() -> dict[str, Any]:
    """The job's endpoints as file_sd targets (:func:`write_targets`); the processes' own
    labels are kept."""
    return {
        "global": {"scrape_interval": "500ms", "scrape_timeout": "500ms",
                   "evaluation_interval": "500ms"},
        "rule_files": ["recording-rules.yml", "alert-rules.yml"],
        "scrape_configs": [{"job_name": JOB, "honor_labels": True,
                            "file_sd_configs": [{"files": ["targets.json"]}]}],
    }


def write_targets(prometheus: Prometheus, endpoints: list[MetricsEndpoint]) -> None:
    """Every endpoint the job published, as a target labelled with its role."""
    groups = [{"targets": [e.url.removeprefix("http://").removesuffix("/metrics")],
               "labels": {"role": e.role}} for e in endpoints]
    staged = prometheus.root / "targets.json.new"
    staged.write_text(json.dumps(groups))
    staged.replace(prometheus.root / "targets.json")  # Prometheus never reads half a file


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) with the dashboard's variables set: this job, a 1 m rate
    window (the whole of pass 0)."""
    doc = json.loads(read("grafana-dashboard.json"))
    return [(p["title"], t["expr"].replace("$job", JOB).replace("$__rate_interval", "1m"))
            for p in doc["panels"] for t in p.get("targets", [])]


def published(workdir: Path) -> list[MetricsEndpoint] | None:
    """The job's endpoints once every process published its own (a pserver under its slot)."""
    store = open_store(f"file://{workdir}/store.db", JOB)
    try:
        endpoints = read_metrics_endpoints(store)
    finally:
        store.close()
    roles = {role: [e for e in endpoints if e.role == role] for role in ROLES}
    if any(len(roles[role]) != count for role, count in ROLES.items()):
        return None
    if sorted(e.name for e in roles["pserver"]) != ["pserver-0", "pserver-1"]:
        return None
    return endpoints


def unix(stamp: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds) as unix seconds."""
    head, _, rest = stamp.partition(".")
    fraction = rest.rstrip("Z")[:6] if rest else "0"
    return datetime.fromisoformat(f"{head}.{fraction}+00:00").timestamp()


def by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in result}


@pytest.mark.slow
def test_prometheus_fires_the_shipped_alerts_on_a_real_job_and_reads_the_dashboard(
        tmp_path: Path) -> None:
    data, gate, workdir = tmp_path / "data", tmp_path / "gate", tmp_path / "job"
    gate.mkdir()
    synth_ctr(str(data), ROWS, seed=3, rows_per_chunk=500, max_vocab=20, num_crosses=0,
              progress=False)
    output = tmp_path / "launcher.out"
    with output.open("wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "2",
             "--standby-masters", "0", "--job-name", JOB, "--workdir", str(workdir),
             "--grace", "5", str(SCRIPT), "--data", str(data), "--gate", str(gate)],
            env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    # started while the job starts: it applies new targets every 5 s, the first a while after
    files = {name: quick(read(name)) for name in ("recording-rules.yml", "alert-rules.yml")}
    prometheus = Prometheus(tmp_path / "prometheus", scrape_config(), files)
    try:
        prometheus.start()
        wait_for(lambda: (gate / "ready").exists() or launcher.poll() is not None, 120,
                 what="the trainer at the start of pass 0")
        assert launcher.poll() is None, output.read_text()[-3000:]
        endpoints = wait_for(lambda: published(workdir), 30, what="every metrics endpoint")
        assert endpoints is not None
        write_targets(prometheus, endpoints)
        wait_for(lambda: by(prometheus.query(f'up{{job="{JOB}"}} == 1'), "role") and len(
            prometheus.query(f'up{{job="{JOB}"}} == 1')) == len(endpoints), 20,
            what="Prometheus scraping every endpoint", interval=0.2)
        wait_for(lambda: prometheus.query(
            f'elasticps_master_job_state{{job="{JOB}", state="running"}} == 1'), 20,
            what="the job running, as Prometheus sees it", interval=0.2)
        samples = f'elasticps_trainer_samples_total{{job="{JOB}"}}'
        wait_for(lambda: prometheus.query(f"{samples} == 0"), 20,
                 what="the trainer's samples scraped before training", interval=0.2)
        go = time.time()
        (gate / "go").touch()

        wait_for(lambda: (gate / "stalled").exists(), 120, what="the end of pass 0")
        wait_for(lambda: prometheus.query(f"{samples} == {ROWS}") and prometheus.query(
            f'elasticps_master_pass{{job="{JOB}"}} == 2'), 20,
            what="pass 0's samples and the master's second pass scraped", interval=0.2)
        check_the_dashboard(prometheus)
        check_the_labels(prometheus)

        # The trainer waits: no sample for the (shrunk) 10 minutes, for 5 minutes.
        stalled = wait_for(lambda: prometheus.alerts().get("ElasticPSNoProgress"), 30,
                           what="ElasticPSNoProgress firing", interval=0.2)
        assert stalled == [{"alertname": "ElasticPSNoProgress", "job": JOB,
                            "severity": "warning"}]
        [active] = [a for a in prometheus.api("alerts")["alerts"]
                    if a["labels"]["alertname"] == "ElasticPSNoProgress"]
        assert unix(active["activeAt"]) > go, "active since before training began"

        # A pserver frozen (SIGSTOP) past its store lease: the master finds its slot empty
        # and ElasticPSPServerDown fires for that shard; thawed, it reclaims the slot.
        frozen = ProcessRecords.read(workdir).serving["pserver-1"]
        os.kill(frozen, signal.SIGSTOP)
        try:
            down = wait_for(lambda: prometheus.alerts().get("ElasticPSPServerDown"), 30,
                            what="ElasticPSPServerDown firing", interval=0.2)
        finally:
            os.kill(frozen, signal.SIGCONT)
        assert down == [{"alertname": "ElasticPSPServerDown", "job": JOB, "shard": "1",
                         "severity": "critical"}]
        wait_for(lambda: prometheus.query(
            f'elasticps_master_pserver_up{{job="{JOB}", shard="1"}} == 1'), 30,
            what="shard 1 held again", interval=0.2)

        for chunk in open_dataset(str(data)).chunks:  # every task of pass 1 is unreadable
            path = data / chunk.path
            if path.stat().st_size > 100:
                path.write_bytes(path.read_bytes()[:100])
        (gate / "resume").touch()
        wait_for(lambda: (gate / "failed").exists(), 60, what="the master failing the job")
        failed = wait_for(lambda: prometheus.alerts().get("ElasticPSJobFailed"), 20,
                          what="ElasticPSJobFailed firing", interval=0.2)
        assert failed == [{"alertname": "ElasticPSJobFailed", "job": JOB,
                           "severity": "critical"}]
        # the recording rules' group is evaluated on its own schedule
        wait_for(lambda: by(prometheus.query("elasticps:job_state == 1"), "job", "state") == {
            (JOB, "failed"): 1.0}, 10, what="elasticps:job_state failed", interval=0.2)
        (gate / "exit").touch()
        assert launcher.wait(timeout=60) != 0  # the job failed
    finally:
        prometheus.stop()
        for name in ("go", "resume", "exit"):
            (gate / name).touch()
        if launcher.poll() is None:
            try:
                launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_quietly(launcher.pid, signal.SIGTERM)
                launcher.wait(timeout=30)


def check_the_dashboard(prometheus: Prometheus) -> None:
    """Every expression parses and returns a series; the ones a person reads first say what
    the job did."""
    results: dict[str, list[dict[str, Any]]] = {}
    for title, expr in dashboard_queries():
        results[expr] = wait_for(lambda e=expr: prometheus.query(e), 20,  # type: ignore[misc]
                                 what=f"a series for {title!r}: {expr}", interval=0.2)
    panels: dict[str, list[list[dict[str, Any]]]] = {}
    for title, expr in dashboard_queries():
        panels.setdefault(title, []).append(results[expr])
    [speed] = panels["Samples/s per trainer"]
    assert list(by(speed, "trainer")) == [("0",)]
    assert by(speed, "trainer")[("0",)] > 0
    [p99] = panels["Pull and push p99 per shard"]
    assert {("0", "Push"), ("1", "Push"), ("0", "PullSparse"), ("1", "PullSparse")} <= set(
        by(p99, "shard", "method"))
    [tasks] = panels["Tasks of the pass by state"]
    assert set(by(tasks, "state")) == {("todo",), ("pending",), ("done",), ("failed",)}
    [state] = panels["Job state"]
    assert list(by(state, "state")) == [("running",)]
    pass_now, passes = panels["Pass"]
    assert (by(pass_now, "job")[(JOB,)], by(passes, "job")[(JOB,)]) == (2.0, 2.0)
    age, _ = panels["Checkpoint age per shard"]
    assert set(by(age, "shard")) == {("0",), ("1",)}
    pservers, trainers = panels["Restarts"]
    assert by(pservers, "shard") == {("0",): 0.0, ("1",): 0.0}
    assert by(trainers, "trainer") == {("0",): 0.0}
    [served] = panels["RPCs by code (servers)"]
    assert ("pserver", "Push", "OK") in by(served, "role", "grpc_method", "grpc_code")
    [called] = panels["RPCs by code (clients)"]
    assert ("trainer", "Push", "OK") in by(called, "role", "grpc_method", "grpc_code")
    # (their rates may read 0 when a pass is shorter than two scrapes: the counters say more)
    def pushes(side: str) -> dict[tuple[str, ...], float]:
        return by(prometheus.query(f'grpc_{side}_handled_total{{job="{JOB}", '
                                   'grpc_method="Push", grpc_code="OK"}'), "shard")

    # every push the trainer made, each shard answered OK (once both sides' last values are
    # scraped: a scrape of a busy machine may time out and leave an older one for a while)
    answered = wait_for(lambda: (lambda server: server if server == pushes("client") else None)(
        pushes("server")), 20, what="the trainer's pushes counted by both sides", interval=0.2)
    assert answered is not None
    assert set(answered) == {("0",), ("1",)}
    assert all(count > 0 for count in answered.values())


def check_the_labels(prometheus: Prometheus) -> None:
    """Every series names the job; no label names a process."""
    names = set(prometheus.api("labels"))
    assert {"job", "role", "shard", "trainer"} <= names
    assert not names & {"node", "job_name", "pid"}
    jobs = by(prometheus.query('count by (job) ({__name__=~"elasticps_.+|grpc_.+|process_.+"})'),
              "job")
    assert list(jobs) == [(JOB,)]
    shards = by(prometheus.query(f'count by (shard) (process_cpu_seconds_total{{job="{JOB}", '
                                 'role="pserver"})'), "shard")
    assert set(shards) == {("0",), ("1",)}
