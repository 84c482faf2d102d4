"""What a person and a monitoring system see of a real job (``elasticps run``: two masters, two
pservers, two trainers): every role's Prometheus metrics scraped during the job and parsed with
prometheus_client's own parser; ``STATUS_URL/metrics`` and ``metrics_urls``; the status page in
a real headless Chromium while the job runs and, served by ``elasticps ui``, after it ended;
``elasticps status`` and ``elasticps logs`` for the local job; JSON log lines naming job, role
and node.

The trainers stop at the end of pass 0 until the test opens a gate (scripts/gated_job.py), so
"during the job" is a state the test waits for, not a moment it hopes to hit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from elasticps.data.synth import synth_ctr
from elasticps.store.local_etcd import free_port
from tests.browser import Browser
from tests.helpers import REPO, CliResult, kill_quietly, run_cli, wait_for

SCRIPT = REPO / "tests/integration/telemetry/scripts/gated_job.py"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
       "PYTHONPATH": str(REPO)}


@dataclass
class RunningJob:
    workdir: Path
    gate: Path
    proc: subprocess.Popen[bytes]
    output: Path
    status_url: str
    first_master: str = ""

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.status_url + "api/status", timeout=5) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def families(url: str) -> dict[str, Any]:
    """The metric families at ``url``, parsed by prometheus_client."""
    return {f.name: f for f in text_string_to_metric_families(get(url))}


def value(family: Any, **labels: str) -> float:
    found = [s.value for s in family.samples
             if s.name in (family.name, family.name + "_total")
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert found, (family.name, labels)
    return float(sum(found))


def elasticps(*args: str) -> CliResult:
    return run_cli(*args, env=ENV)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningJob]:
    root = tmp_path_factory.mktemp("observed")
    data, gate, workdir = root / "data", root / "gate", root / "job"
    gate.mkdir()
    synth_ctr(str(data), 24000, seed=5, test_rows=2000, rows_per_chunk=500, max_vocab=20,
              num_crosses=0, signal=2.0, progress=False)
    output = root / "launcher.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
             "--workdir", str(workdir), "--grace", "5", "--log-format", "json", str(SCRIPT),
             "--data", str(data), "--gate", str(gate)],
            env={**ENV, "PADDLE_LEASE_TTL": "2"}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        match = wait_for(lambda: re.search(r"status: (http://\S+/)", output.read_text()), 120,
                         what="the launcher's status URL")
        running = RunningJob(workdir, gate, proc, output, match.group(1))
        running.first_master = running.status()["master"]
        wait_for(lambda: len(list(gate.glob("*.reached"))) == 2, 180,
                 what="both trainers at the end of pass 0")
        # the master has looked at the job a few times since (the charts have points) and has
        # every trainer's pass-0 metrics
        wait_for(lambda: (lambda d: len(d["series"]) >= 3 and d["pass_metrics"]
                          and d["state"] == "running")(running.status()), 60,
                 what="the status page's document of the gated job", interval=0.2)
        yield running
    finally:
        (gate / "open").touch()
        if proc.poll() is None:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                kill_quietly(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    handle = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield handle
    handle.close()


def screenshot_to(browser: Browser, tmp_path: Path, name: str) -> Path:
    """The whole page as a PNG; with ``ELASTICPS_SCREENSHOTS=docs/`` also copied there (the
    pictures in docs/observability.md and the README)."""
    path = browser.screenshot(tmp_path / name)
    assert path.stat().st_size > 10_000
    keep = os.environ.get("ELASTICPS_SCREENSHOTS")
    if keep:
        shutil.copy(path, Path(keep) / name)
    return path


def fits_600_px(browser: Browser) -> None:
    """At 600 px nothing on the page is cut off or scrolls sideways."""
    browser.resize(600)
    try:
        assert browser.overflowing() == []
    finally:
        browser.resize(1400)


def test_every_role_serves_prometheus_metrics_during_the_job(job: RunningJob) -> None:
    doc = job.status()
    urls = doc["metrics_urls"]
    assert sorted(urls) == ["master", "pserver", "trainer"]
    assert len(urls["master"]) == 2  # the leader and the hot standby
    assert sorted(urls["pserver"]) == ["pserver-0", "pserver-1"]
    assert sorted(re.sub(r"-vm.*|-\w+-\d+$", "", n) for n in urls["trainer"]) == [
        "trainer-0", "trainer-1"]

    leaders = []
    for node, url in urls["master"].items():
        fams = families(url)
        assert value(fams["elasticps_process_info"], job=doc["job"], role="master") == 1
        assert node not in str(fams["elasticps_process_info"].samples)  # no PID in a label
        leaders.append(value(fams["elasticps_master_leader"]))
        if value(fams["elasticps_master_leader"]) == 1:
            assert value(fams["elasticps_master_tasks"], state="todo") == doc["num_tasks"]
            assert value(fams["elasticps_master_pass"]) == 2  # 1-based: the second pass
            assert value(fams["elasticps_master_tasks_finished"]) == doc["num_tasks"]
            dispatches = [s.value for s in fams["elasticps_master_dispatch_seconds"].samples
                          if s.name.endswith("_count")]
            assert dispatches[0] >= doc["num_tasks"]  # every task of pass 0 was handed out
            writes = [s.value for s in fams["elasticps_master_store_write_seconds"].samples
                      if s.name.endswith("_count")]
            assert writes[0] >= doc["num_tasks"]
            assert value(fams["elasticps_master_job_progress_ratio"]) == pytest.approx(0.5)
            assert value(fams["elasticps_master_failovers"]) == 0
    assert sorted(leaders) == [0.0, 1.0]

    for name, url in urls["pserver"].items():
        fams = families(url)
        shard = name.removeprefix("pserver-")
        assert value(fams["elasticps_process_info"], job=doc["job"], role="pserver",
                     shard=shard) == 1
        assert value(fams["elasticps_pserver_pushes"], shard=shard) > 0  # on every series
        assert value(fams["elasticps_pserver_table_rows"], table="embedding") > 0
        assert value(fams["elasticps_pserver_table_bytes"]) > 0
        pushes = value(fams["elasticps_pserver_pushes"])
        assert pushes > 0
        push_count = [s.value for s in fams["elasticps_pserver_rpc_seconds"].samples
                      if s.name.endswith("_count") and s.labels["method"] == "Push"]
        assert push_count[0] >= pushes  # every applied push was timed
        assert value(fams["elasticps_pserver_duplicates"]) == 0
        assert value(fams["elasticps_pserver_checkpoint_age_seconds"]) >= 0  # reconciled pass 0

    samples = 0.0
    for name, url in urls["trainer"].items():
        fams = families(url)
        index = name.split("-")[1]  # trainer-<index>-<host>-<pid>
        assert value(fams["elasticps_process_info"], job=doc["job"], role="trainer",
                     trainer=index) == 1
        samples += value(fams["elasticps_trainer_samples"])
        for phase in ("forward", "backward", "pull_wait", "push_wait"):
            assert value(fams["elasticps_trainer_step_phase_seconds"], phase=phase) > 0
        assert value(fams["elasticps_trainer_loss"]) > 0
        assert value(fams["elasticps_trainer_staleness_batches"]) in (0, 1)
        assert value(fams["elasticps_trainer_pass_metric"], metric="test_auc") > 0.5
    assert samples == 24000  # pass 0, every row once


def test_status_url_serves_prometheus_text_and_lists_metrics_urls(job: RunningJob) -> None:
    fams = families(job.status_url + "metrics")
    assert value(fams["elasticps_master_leader"]) == 1
    assert value(fams["elasticps_master_tasks"], state="todo") == job.status()["num_tasks"]
    doc = job.status()
    assert doc["live"] is True
    assert [t["name"] for t in doc["trainers"]] == ["trainer-0", "trainer-1"]
    assert [p["name"] for p in doc["pservers"]] == ["pserver-0", "pserver-1"]
    assert all(p["rows"] > 0 and p["up"] for p in doc["pservers"])
    kinds = {e["kind"] for e in doc["events"]}
    assert {"trainer", "pass", "reconciled"} <= kinds, doc["events"]
    running = elasticps("status", "--workdir", str(job.workdir))
    assert running.returncode == 0, running.stderr
    assert running.stdout.splitlines()[0].endswith("): running"), running.stdout
    assert f"status page: {job.status_url}" in running.stdout
    assert "trainer  2 trainer(s), 2 running, 0 restart(s)" in running.stdout


def test_the_running_jobs_page_in_a_real_browser(job: RunningJob, browser: Browser,
                                                 tmp_path: Path) -> None:
    browser.open_page(job.status_url)
    assert browser.text("state") == "running"
    assert browser.text("live") == "live"
    for chart in ("chart-speed", "chart-loss", "chart-pass"):
        assert browser.chart_points(chart) > 0, chart
    # each trainer's own line beside the job's
    assert browser.texts("#chart-speed + .legend .item") == ["job", "trainer-0", "trainer-1"]
    trainers = browser.table_rows("trainers")
    assert [row[0] for row in trainers] == ["trainer-0", "trainer-1"]
    assert all(row[2] == "running" for row in trainers)
    pservers = browser.table_rows("pservers")
    assert [row[0] for row in pservers] == ["pserver-0", "pserver-1"]
    for row in pservers:  # push ms, pull ms, CPU, memory: read from the pserver's metrics
        assert float(row[5]) > 0, row
        assert float(row[6]) > 0, row
        assert row[7].endswith("%"), row
        assert row[8].endswith("MiB"), row
    assert "reconciled" in browser.text("events")
    assert browser.text("elapsed") != "\u2013"
    fits_600_px(browser)
    screenshot_to(browser, tmp_path, "status-page-running.png")
    assert browser.console_errors() == []


def test_a_killed_pserver_shows_as_a_restart_and_a_recovery(job: RunningJob,
                                                           browser: Browser) -> None:
    before = job.status()["pservers"][1]
    before_url = job.status()["metrics_urls"]["pserver"]["pserver-1"]
    os.kill(before["pid"], signal.SIGKILL)  # the launcher restarts it; it restores pass 0

    def restarted() -> dict[str, Any] | None:
        doc = job.status()
        row = doc["pservers"][1]
        kinds = {(e["kind"], e["subject"]) for e in doc["events"]}
        done = row["up"] and row["pid"] != before["pid"] and row["restarts"] == 1 and {
            ("restart", "pserver-1"), ("recovery", "pserver-1")} <= kinds
        return doc if done else None

    doc = wait_for(restarted, 60, what="pserver 1's restart in the status page", interval=0.2)
    recovery = [e for e in doc["events"] if e["kind"] == "recovery"]
    assert "pserver 1 restored checkpoint" in recovery[-1]["message"]
    # the new process timed its restore; the one that lived on timed its checkpoint of pass 0
    def republished() -> dict[str, str] | None:
        urls: dict[str, str] = job.status()["metrics_urls"]["pserver"]
        return urls if urls.get("pserver-1") not in (None, before_url) else None

    urls = wait_for(republished, 30, what="pserver 1's new metrics URL", interval=0.2)
    restarted_fams = families(urls["pserver-1"])
    assert value(restarted_fams["elasticps_pserver_restore_seconds"]) > 0
    checkpoints = [s.value for s in families(urls["pserver-0"])[
        "elasticps_pserver_checkpoint_seconds"].samples if s.name.endswith("_count")]
    assert checkpoints[0] >= 1
    browser.open_page(job.status_url)
    assert browser.table_rows("pservers")[1][-1] == "1"  # restarts
    assert "came back as pid" in browser.text("events")
    assert browser.console_errors() == []


@pytest.fixture(scope="module")
def finished(job: RunningJob) -> Iterator[tuple[RunningJob, subprocess.Popen[str]]]:
    """The gate opened and the job run to its end, with ``elasticps logs -f`` following a
    trainer's log all along."""
    follower = subprocess.Popen(
        [sys.executable, "-m", "elasticps", "logs", "--workdir", str(job.workdir),
         "trainer-1", "-f"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (job.gate / "open").touch()
        assert job.proc.wait(timeout=180) == 0, job.output.read_text()[-3000:]
        yield job, follower
    finally:
        if follower.poll() is None:
            kill_quietly(follower.pid, signal.SIGKILL)
            follower.wait()


def test_status_and_logs_of_the_local_job(finished: tuple[RunningJob, subprocess.Popen[str]]
                                          ) -> None:
    job, follower = finished
    out, err = follower.communicate(timeout=60)  # -f ends by itself once the launcher exits
    assert follower.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert records, out[-2000:]
    assert {r["role"] for r in records} == {"trainer"}
    assert {r["job"] for r in records} == {records[-1]["job"]}
    assert records[-1]["job"].startswith("gated-job-")
    assert all(r["node"].startswith("trainer-1-") for r in records)
    assert any("finished training" in r["message"] for r in records), out[-2000:]
    for line in (job.workdir / "logs" / "master.log").read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            assert record["role"] == "master"
            assert record["job"] == records[-1]["job"]
            assert record["node"].startswith("master-")

    status = elasticps("status", "--workdir", str(job.workdir))
    assert status.returncode == 0, status.stderr
    first = status.stdout.splitlines()[0]
    assert first == f"job {records[-1]['job']} (local, {job.workdir}): succeeded", status.stdout
    assert "trainer  2 trainer(s), 0 running, 0 restart(s)" in status.stdout
    assert f"elasticps ui --workdir {job.workdir}" in status.stdout

    tail = elasticps("logs", "--workdir", str(job.workdir), "--role", "pserver", "--index", "1",
                     "--tail", "3")
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == 3


def test_the_finished_jobs_page_served_by_elasticps_ui(
        finished: tuple[RunningJob, subprocess.Popen[str]], browser: Browser,
        tmp_path: Path) -> None:
    job, _ = finished
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "elasticps", "ui", str(job.workdir), "--port",
                           str(port)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert ui.stdout is not None
        assert f"http://127.0.0.1:{port}/" in ui.stdout.readline()
        doc = json.loads(get(f"http://127.0.0.1:{port}/api/status"))
        assert doc["live"] is False
        assert doc["state"] == "succeeded"
        assert all(p["rows"] > 0 for p in doc["pservers"])  # the last ones scraped
        assert [p["pass"] for p in doc["pass_metrics"]] == [0, 1]
        # the standby, stopped with the job, took no lead: the leader saved the page
        assert doc["master"] == job.first_master
        assert "failover" not in {e["kind"] for e in doc["events"]}
        browser.open_page(f"http://127.0.0.1:{port}/")
        assert browser.text("state") == "succeeded"
        assert browser.text("eta") == "done"
        for chart in ("chart-speed", "chart-loss"):
            assert browser.chart_points(chart) >= 3, chart
        assert browser.chart_points("chart-pass") >= 2  # a point per pass and metric
        trainers, pservers = browser.table_rows("trainers"), browser.table_rows("pservers")
        assert [(row[0], row[2]) for row in trainers] == [("trainer-0", "finished"),
                                                           ("trainer-1", "finished")]
        assert [(row[0], row[2]) for row in pservers] == [("pserver-0", "stopped"),
                                                           ("pserver-1", "stopped")]
        # the final metrics, labelled: the trainers' result (the last pass's test metrics)
        result = dict(zip(browser.texts("#result dt"), browser.texts("#result dd"),
                          strict=True))
        assert 0.5 < float(result["auc"]) <= 1.0, result
        assert result["passes"] == "2"
        labels = browser.texts("#chart-pass .value-label")  # each pass's dot says its value
        assert any(label.startswith("test_auc: 0.") for label in labels), labels
        assert "every pass is done: training succeeded" in browser.text("events")
        fits_600_px(browser)
        screenshot_to(browser, tmp_path, "status-page-succeeded.png")
        assert browser.console_errors() == []
    finally:
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=30) == 0
