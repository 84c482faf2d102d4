"""The online example as a user runs it (``elasticps run ... examples/online/train.py --stream
PREFIX``, 2 trainers, 2 pservers, real processes): the job trains the partitions there, waits
visibly for more, is stopped, and restarted days later in its workdir resumes from its
checkpoints and the next partition (each partition trained by exactly one of the two runs) until
``_END``; summary.json holds every partition and its progressive AUC. A new job started warm
from the first job's export (``--warm-start``) scores its first partition like the trained
model, where a cold start scores near chance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from elasticps.data import read_manifest
from elasticps.store import open_store
from elasticps.store.keys import JOB_SCORES_PREFIX, read_task_scores
from elasticps.store.local_etcd import free_port
from tests.browser import Browser
from tests.helpers import REPO

EXAMPLE = REPO / "examples/online"
ROWS = 4000
FIRST = ["dt=2026-12-01/hour=00", "dt=2026-12-01/hour=01"]
LATER = ["dt=2026-12-04/hour=00", "dt=2026-12-04/hour=01"]  # landed three days later
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
       "PYTHONPATH": str(REPO)}


def make_stream(prefix: Path, *flags: str) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "make_stream.py"), "--out", str(prefix),
                    "--rows", str(ROWS), "--every", "0", "--drift-hours", "0", *flags],
                   env=ENV, check=True, capture_output=True, timeout=60)


def run_argv(workdir: Path, prefix: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
            "--workdir", str(workdir), "--job-name", "online", "--grace", "5", *extra,
            str(EXAMPLE / "train.py"), "--stream", str(prefix)]


def finish(argv: list[str], workdir: Path) -> dict[str, Any]:
    proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=180,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert isinstance(summary, dict)
    return summary


def tasks_of(prefix: Path, name: str) -> int:
    return len(read_manifest(str(prefix / name)).chunks)  # one chunk per task


def wait_scored(workdir: Path, prefix: Path, names: list[str], timeout: float = 120) -> None:
    """Until every task of ``names`` finished and left its scores (the job trained them)."""
    deadline = time.monotonic() + timeout
    with open_store(f"file://{workdir}/store.db", "online") as store:
        while time.monotonic() < deadline:
            if all(len(read_task_scores(store, n)) == tasks_of(prefix, n) for n in names):
                return
            time.sleep(0.2)
    raise AssertionError(f"the job did not train {names} within {timeout}s")


def wait_status(workdir: Path, *words: str, timeout: float = 60) -> str:
    """``elasticps status`` once it says each of ``words``."""
    deadline = time.monotonic() + timeout
    said = ""
    while time.monotonic() < deadline:
        said = subprocess.run([sys.executable, "-m", "elasticps", "status", "--workdir",
                               str(workdir)], env=ENV, capture_output=True, text=True,
                              timeout=60, check=False).stdout
        if all(w in said for w in words):
            return said
        time.sleep(0.5)
    raise AssertionError(f"elasticps status never said {words!r}; last:\n{said}")


def page_shows_the_chart(workdir: Path, profile: Path, points: int) -> None:
    """The finished job's page (``elasticps ui``) in Chromium draws a point per partition."""
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "elasticps", "ui", str(workdir), "--port",
                           str(port)], env=ENV, stdout=subprocess.PIPE, text=True)
    browser = Browser(profile)
    try:
        assert ui.stdout is not None
        assert f"http://127.0.0.1:{port}/" in ui.stdout.readline()
        browser.open_page(f"http://127.0.0.1:{port}/")
        assert browser.chart_points("chart-progressive") == points
        assert browser.console_errors() == []
    finally:
        browser.close()
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=30)


@pytest.mark.slow
def test_a_stream_is_followed_resumed_days_later_and_a_new_job_starts_warm(
        tmp_path: Path) -> None:
    prefix, workdir = tmp_path / "clicks", tmp_path / "job"
    make_stream(prefix, "--partitions", "2", "--no-end")
    first = subprocess.Popen(run_argv(workdir, prefix), env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_scored(workdir, prefix, FIRST)
        said = wait_status(workdir, "now: waiting for the stream's next partition",
                           "progressive AUC 0.", f"({FIRST[-1]})")
        assert f"stream 2 partition(s), trained through {FIRST[-1]} (lag " in said
        with open_store(f"file://{workdir}/store.db", "online") as store:
            stopped_at = store.revision()
        subprocess.run([sys.executable, "-m", "elasticps", "stop", "--workdir", str(workdir)],
                       env=ENV, check=True, capture_output=True, timeout=90)
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()

    make_stream(prefix, "--first", "72", "--partitions", "2")  # days later, then _END
    summary = finish(run_argv(workdir, prefix), workdir)
    assert summary["partitions"] == FIRST + LATER
    assert summary["progressive_rows"] == [ROWS] * 4
    cold = summary["progressive_auc"]
    assert all(0.45 < auc < 1 for auc in cold), cold
    assert cold[-1] > cold[0] + 0.05  # it learnt the planted model as the stream went on
    # Each partition's tasks were trained (and scored) by exactly one of the two runs.
    with open_store(f"file://{workdir}/store.db", "online") as store:
        written = {kv.key: kv.mod_revision for kv in store.get_prefix(JOB_SCORES_PREFIX)}
    for name in FIRST + LATER:
        revisions = [r for key, r in written.items() if key.split("//")[0].endswith(name)]
        assert len(revisions) == tasks_of(prefix, name)
        assert all((r < stopped_at) == (name in FIRST) for r in revisions), name

    page_shows_the_chart(workdir, tmp_path / "chromium", points=4)

    warm_dir = tmp_path / "warm"
    warm_argv = run_argv(warm_dir, prefix, "--warm-start", str(workdir / "model"))
    warm = finish([*warm_argv, "--from", LATER[-1]], warm_dir)
    assert warm["partitions"] == [LATER[-1]]
    assert warm["progressive_auc"][0] > cold[0] + 0.05, (warm, cold)
