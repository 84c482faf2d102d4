"""`elasticps run`'s progress: a bar with ETA on a terminal, plain lines otherwise; and the local
`status` verb's pure parts (`logs`: test_role_logs.py)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.launch.job_watch import snapshot
from elasticps.launch.local_cli import run_ui, summary
from elasticps.launch.local_job import LocalJob, failure_record, last_traceback
from elasticps.launch.progress_view import (
    ECHO_RESERVE,
    Field,
    PlainLines,
    RichBar,
    Snapshot,
    fit,
    format_eta,
)
from elasticps.store.keys import TrainerProgress

STATUS = {"pass": 1, "num_passes": 2, "num_tasks": 20, "counts": {"done": 4},
          "state": "running", "live_trainers": ["a"],
          "progress": {"fraction": 0.6, "eta_s": 75.0}}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_snapshot_has_the_line_the_share_done_the_eta_and_the_time_since_the_launch(
        ) -> None:
    snap = snapshot(STATUS, {"a": TrainerProgress(loss=0.25)}, 1500.0, 3725.0)
    assert snap.line == ("pass 2/2 | 60% | ETA 1:15 | elapsed 1:02:05 | running | tasks 4/20 | "
                         "trainers 1 | 1,500 samples/s | loss 0.2500")
    assert snap.fraction == 0.6
    assert snapshot(None, {}, None).line == "starting | trainers 0"
    assert format_eta(75.0) == "1:15"
    assert format_eta(3725.0) == "1:02:05"
    assert format_eta(None) == "-:--"


def test_the_line_says_what_the_job_does_before_and_after_training() -> None:
    """While a trainer writes the data the master has no dataset; after the last pass a
    trainer exports and scores: the line says so, with no 0% ETA and no 0 samples/s."""
    waiting = {"state": "waiting_for_dataset", "pass": None, "live_trainers": ["a", "b"],
               "progress": {"fraction": 0.0, "eta_s": None}}  # no "0%": nothing is known
    progress = {"a": TrainerProgress(stage="writing data"),
                "b": TrainerProgress(stage="waiting for data")}
    snap = snapshot(waiting, progress, 0.0, 12.0)
    assert snap.line == "elapsed 0:12 | writing data (a); waiting for data (b) | trainers 2"
    assert "ETA" not in snap.line
    assert "samples/s" not in snap.line
    assert snap.fraction is None  # the bar pulses: there is no share to show yet
    done = {**STATUS, "state": "succeeded", "progress": {"fraction": 1.0, "eta_s": 0.0},
            "live_trainers": ["b"]}
    exporting = snapshot(done, {"a": TrainerProgress(), "b": TrainerProgress(
        stage="exporting", loss=0.5)}, 0.0, 80.0)
    assert exporting.line == "pass 2/2 | 100% | elapsed 1:20 | exporting (b) | trainers 1 | " \
                             "loss 0.5000"
    quiet = snapshot(done, {"b": TrainerProgress()}, 0.0, 80.0)
    assert "training done, 1 trainer(s) finishing" in quiet.line


def test_plain_lines_print_a_change_at_most_every_ten_seconds() -> None:
    out = io.StringIO()
    view = PlainLines(out)
    snap = Snapshot((Field("pass 1/2", 1), Field("25%", 0)), 0.25)
    view.show(snap, 0.0)
    view.show(Snapshot((Field("pass 1/2", 1), Field("30%", 0)), 0.3), 5.0)  # too soon
    view.show(snap, 11.0)  # the same line again: nothing new to say
    view.show(Snapshot((Field("pass 2/2", 1), Field("75%", 0)), 0.75), 12.0)
    assert out.getvalue().splitlines() == ["pass 1/2 | 25%", "pass 2/2 | 75%"]


def test_fitting_leaves_out_whole_fields_least_important_first() -> None:
    fields = (Field("pass 1/1", 1), Field("42%", 0), Field("tasks 13/32", 3),
              Field("loss 0.5", 5))
    assert fit(fields, 100) == "pass 1/1 | 42% | tasks 13/32 | loss 0.5"
    assert fit(fields, 30) == "pass 1/1 | 42% | tasks 13/32"
    assert fit(fields, 16) == "pass 1/1 | 42%"
    assert fit(fields, 5) == "42%"
    assert fit(fields, 2) == ""


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_the_terminal_bar_is_never_cut_mid_field(columns: int) -> None:
    snap = snapshot(STATUS, {"a": TrainerProgress(loss=0.25)}, 12345.0, 3725.0)
    out = io.StringIO()
    bar = RichBar(out, width=columns)
    bar.show(snap, 0.0)
    bar.say("elasticps run: pserver 0 (pid 1) exited with signal SIGKILL; restarted it")
    bar.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn in place
    assert "restarted it" in text
    drawn = [ANSI.sub("", line).rstrip() for line in text.replace("\r", "\n").splitlines()]
    bars = [line for line in drawn if "━" in line]
    assert bars
    whole = {f.text for f in snap.fields}
    for line in bars:
        assert len(line) <= columns - ECHO_RESERVE, line  # room for the terminal's "^C"
        shown = line.lstrip("━╸╺ ").split(" | ")
        assert set(shown) <= whole, shown  # only whole fields
        assert {"pass 2/2", "60%", "ETA 1:15", "running"} <= set(shown)
    if columns >= 80:
        assert "elapsed 1:02:05" in bars[-1]
    if columns >= 120:
        assert "12,345 samples/s" in bars[-1]


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
           "trainers": [{"name": "trainer-0", "live": False, "samples": 1200, "restarts": 0,
                         "state": "finished"}],
           "launcher": {"state": "succeeded"}}
    text = summary(job, doc)
    assert text.splitlines()[0] == f"job demo (local, {tmp_path}): succeeded"
    assert "pserver  1 shard(s), 0 serving, 1 restart(s)" in text
    assert "trainer  1 trainer(s), 0 running, 0 restart(s)" in text
    assert "pass 2/2 | tasks 20/20 | 100.0% | ETA done | loss 0.4000" in text
    assert "trainer-0    finished" in text
    assert f"elasticps ui --workdir {tmp_path}" in text
    failed = summary(job, {**doc, "launcher": {"state": "failed"},
                           "job_failed_reason": "trainer-1 failed with exit code 1"})
    assert "succeeded (launcher: failed)" in failed
    assert "failed: trainer-1 failed with exit code 1" in failed
    broken = summary(job, {**doc, "state": "failed", "progress": {"eta_s": None},
                           "failure": {"process": "trainer 1", "log": "logs/trainer-1.log",
                                       "traceback": "Traceback (most recent call last):\n"
                                                    "ValueError: bad row"}})
    assert "ETA -:--" in broken  # a failed job is not "done"
    assert "last lines of logs/trainer-1.log:\n    Traceback (most recent call last):\n" \
        "    ValueError: bad row" in broken


def test_ui_refuses_an_address_beyond_this_machine_before_reading_the_job(
        tmp_path: Path) -> None:
    args = argparse.Namespace(workdir=str(tmp_path / "no-job"), host="0.0.0.0", port=0)
    with pytest.raises(ConfigError, match=r"--host='0\.0\.0\.0'.*loopback"):
        run_ui(args)
    args.host = "127.0.0.1"  # the check passes; then the missing job is what is wrong
    with pytest.raises(ConfigError, match="no-job"):
        run_ui(args)


def test_a_failed_processs_last_traceback_is_kept_for_the_page() -> None:
    log = "\n".join(["INFO started", "Traceback (most recent call last):", "  old", "E: old",
                     "INFO retried", "Traceback (most recent call last):",
                     '  File "train.py", line 9, in <module>', "ValueError: bad row 7"])
    record = failure_record("trainer 1", "trainer 1 failed with exit code 1",
                            Path("logs/trainer-1.log"), log)
    assert record == {"process": "trainer 1", "reason": "trainer 1 failed with exit code 1",
                      "log": "logs/trainer-1.log",
                      "traceback": "Traceback (most recent call last):\n"
                                   '  File "train.py", line 9, in <module>\n'
                                   "ValueError: bad row 7"}
    killed = "\n".join(f"INFO step {i}" for i in range(40))  # SIGKILL: no traceback
    assert last_traceback(killed).splitlines() == [f"INFO step {i}" for i in range(25, 40)]


def test_a_json_logs_traceback_is_its_records_exc() -> None:
    """With --log-format json the traceback is a record's exc (telemetry/stream_capture.py),
    not lines of its own: that is what the page keeps."""
    exc = 'Traceback (most recent call last):\n  File "train.py", line 9\nValueError: bad row 7'
    log = "\n".join([json.dumps({"level": "INFO", "message": "step 1"}),
                     json.dumps({"level": "ERROR", "message": "An uncaught ValueError ended "
                                 "the process: bad row 7", "exc": exc}),
                     json.dumps({"level": "INFO", "logger": "stdout", "message": "bye"})])
    assert last_traceback(log) == exc
