"""`elasticps run`'s progress: a bar with ETA on a terminal, plain lines otherwise; and the local
`status` verb's pure parts (`logs`: test_role_logs.py)."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.launch.job_watch import snapshot
from elasticps.launch.local_cli import run_ui, summary
from elasticps.launch.local_job import LocalJob
from elasticps.launch.progress_view import PlainLines, RichBar, Snapshot, format_eta
from elasticps.store.keys import TrainerProgress

STATUS = {"pass": 1, "num_passes": 2, "num_tasks": 20, "counts": {"done": 4},
          "state": "running", "live_trainers": ["a"],
          "progress": {"fraction": 0.6, "eta_s": 75.0}}


def test_a_snapshot_has_the_line_the_share_done_and_the_eta() -> None:
    snap = snapshot(STATUS, {"a": TrainerProgress(loss=0.25)}, 1500.0)
    assert snap == Snapshot("pass 2/2 | tasks 4/20 | trainers 1 | 1,500 samples/s | "
                            "loss 0.2500 | running", 0.6, 75.0)
    assert snapshot(None, {}, None) == Snapshot("trainers 0", None, None)
    assert format_eta(75.0) == "1:15"
    assert format_eta(3725.0) == "1:02:05"
    assert format_eta(None) == "-:--"


def test_plain_lines_print_a_change_at_most_every_ten_seconds() -> None:
    out = io.StringIO()
    view = PlainLines(out)
    snap = Snapshot("pass 1/2 | running", 0.25, 30.0)
    view.show(snap, 0.0)
    view.show(Snapshot("pass 1/2 | other", 0.3, 20.0), 5.0)  # too soon
    view.show(snap, 11.0)  # the same line again: nothing new to say
    view.show(Snapshot("pass 2/2 | running", 0.75, 10.0), 12.0)
    assert out.getvalue().splitlines() == ["pass 1/2 | running | 25.0% | ETA 0:30",
                                           "pass 2/2 | running | 75.0% | ETA 0:10"]


def test_the_terminal_bar_shows_share_eta_and_messages_above_it() -> None:
    out = io.StringIO()
    bar = RichBar(out, width=140)
    bar.show(Snapshot("pass 2/2 | tasks 4/20 | running", 0.6, 75.0), 0.0)
    bar.say("elasticps run: pserver 0 (pid 1) exited with signal SIGKILL; restarted it")
    bar.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn in place
    assert "pass 2/2" in text
    assert "60%" in text
    assert "ETA 1:15" in text
    assert "tasks 4/20 | running" in text
    assert "restarted it" in text
    assert "━" in text  # the bar itself


def job_in(tmp_path: Path) -> LocalJob:
    (tmp_path / "logs").mkdir()
    for name in ("master.log", "master-1.log", "pserver-0.log", "trainer-0.log",
                 "trainer-1.log"):
        (tmp_path / "logs" / name).write_text("".join(f"{name} line {i}\n" for i in range(5)))
    (tmp_path / "job.json").write_text(json.dumps({"store": f"file://{tmp_path}/s.db",
                                                    "job_name": "demo", "launcher_pid": 0}))
    return LocalJob.find(tmp_path)


def test_a_local_job_is_found_through_its_workdir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"job\.json"):
        LocalJob.find(tmp_path)
    job = job_in(tmp_path)
    assert (job.job_name, job.store_url) == ("demo", f"file://{tmp_path}/s.db")
    assert not job.launcher_alive()
    assert job.saved_document() is None
    mine = LocalJob(tmp_path, job.store_url, "demo", os.getpid())
    assert mine.launcher_alive()


def test_the_status_summary_of_a_finished_job(tmp_path: Path) -> None:
    job = job_in(tmp_path)
    doc = {"state": "succeeded", "live": False, "master": "master-h-1", "pass": 1,
           "num_passes": 2, "done": True, "loss": 0.4,
           "progress": {"fraction": 1.0, "tasks_done": 20, "tasks_total": 20},
           "pservers": [{"name": "pserver-0", "address": "a:1", "rows": 10, "restarts": 1}],
           "trainers": [{"name": "trainer-0", "live": False, "samples": 1200, "restarts": 0}],
           "launcher": {"state": "succeeded"}}
    text = summary(job, doc)
    assert text.splitlines()[0] == f"job demo (local, {tmp_path}): succeeded"
    assert "pserver  1 shard(s), 0 serving, 1 restart(s)" in text
    assert "trainer  1 trainer(s), 0 running, 0 restart(s)" in text
    assert "pass 2/2 | tasks 20/20 | 100.0% | ETA done | loss 0.4000" in text
    assert f"elasticps ui --workdir {tmp_path}" in text
    failed = summary(job, {**doc, "launcher": {"state": "failed"},
                           "job_failed_reason": "trainer-1 failed with exit code 1"})
    assert "succeeded (launcher: failed)" in failed
    assert "failed: trainer-1 failed with exit code 1" in failed


def test_ui_refuses_an_address_beyond_this_machine_before_reading_the_job(
        tmp_path: Path) -> None:
    args = argparse.Namespace(workdir=str(tmp_path / "no-job"), host="0.0.0.0", port=0)
    with pytest.raises(ConfigError, match=r"--host='0\.0\.0\.0'.*loopback"):
        run_ui(args)
    args.host = "127.0.0.1"  # the check passes; then the missing job is what is wrong
    with pytest.raises(ConfigError, match="no-job"):
        run_ui(args)
