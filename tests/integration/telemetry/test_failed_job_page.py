"""A failed job's page, as a person sees it: a real `elasticps run` (one master, one pserver,
one trainer) whose trainer trains a pass and then raises in its own code; the launcher fails
the job, and the page `elasticps ui` serves says so with the trainer's last traceback, the
trainer's row failed, no ETA, the trainer's log, and a layout that fits 600 px."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.data.synth import synth_ctr
from elasticps.store.local_etcd import free_port
from tests.browser import Browser
from tests.helpers import REPO, wait_for
from tests.integration.telemetry.test_job_observability import ENV, fits_600_px, screenshot_to

SCRIPT = REPO / "tests/integration/telemetry/scripts/failing_job.py"


@pytest.mark.slow
def test_a_failed_jobs_page_shows_why_it_failed(tmp_path: Path) -> None:
    data, workdir = tmp_path / "data", tmp_path / "job"
    synth_ctr(str(data), 4000, seed=5, test_rows=0, rows_per_chunk=500, max_vocab=20,
              num_crosses=0, progress=False)
    launched = subprocess.run(
        [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "1",
         "--standby-masters", "0", "--workdir", str(workdir), "--grace", "5", str(SCRIPT),
         "--data", str(data)],
        env={**ENV, "PADDLE_LEASE_TTL": "2"}, capture_output=True, text=True, timeout=240)
    assert launched.returncode == 1, launched.stderr[-3000:]
    assert "trainer 0 failed with exit code 1" in launched.stderr
    saved = json.loads((workdir / "status.json").read_text())
    assert saved["failure"]["process"] == "trainer 0"
    assert saved["failure"]["traceback"].startswith("Traceback (most recent call last):")
    assert saved["failure"]["traceback"].endswith(
        "ValueError: the export holds 0 rows; the scorer needs at least one")

    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "elasticps", "ui", str(workdir), "--port",
                           str(port)], env=ENV, stdout=subprocess.PIPE, text=True)
    browser = Browser(tmp_path / "chromium-profile")
    try:
        assert ui.stdout is not None
        assert f"http://127.0.0.1:{port}/" in ui.stdout.readline()
        browser.open_page(f"http://127.0.0.1:{port}/")
        assert browser.text("state") == "failed"
        assert browser.text("eta") == "\u2013"  # not "done"
        reason = browser.text("failure-reason")
        assert reason.startswith("The job failed: trainer 0 failed with exit code 1"), reason
        assert "logs/trainer-0.log" in reason
        trace = browser.text("traceback")
        assert re.search(r'File ".*failing_job\.py", line \d+, in check_the_export', trace)
        assert "runpy" not in trace  # from the script down: the runner's frames say nothing
        assert trace.endswith("ValueError: the export holds 0 rows; the scorer needs at "
                              "least one")
        assert [(row[0], row[2]) for row in browser.table_rows("trainers")] == [
            ("trainer-0", "failed")]
        assert [(row[0], row[2]) for row in browser.table_rows("pservers")] == [
            ("pserver-0", "stopped")]
        assert "the job failed: trainer 0 failed with exit code 1" in browser.text("events")
        # the log of the process that failed the job is the one shown
        wait_for(lambda: "ValueError" in browser.text("log"), 10, "the trainer's log")
        assert browser.texts("#log-names .chosen") == ["trainer-0"]
        fits_600_px(browser)
        screenshot_to(browser, tmp_path, "status-page-failed.png")
        assert browser.console_errors() == []
    finally:
        browser.close()
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=30) == 0
