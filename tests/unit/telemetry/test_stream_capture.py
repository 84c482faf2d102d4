"""With ``--log-format json`` a role's log is JSON records only: the user script's prints, its
stderr, warnings and uncaught exceptions (with their tracebacks) become records naming the
job, the role and the node, as a log collector needs."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.telemetry.stream_capture import MAX_LINE, LineRecords
from tests.helpers import REPO

SCRIPT = Path(__file__).parent / "scripts" / "noisy_script.py"


def test_complete_lines_become_records_and_the_rest_at_the_end() -> None:
    sink = io.StringIO()
    logger = logging.getLogger("test.stream_capture")
    logger.propagate = False
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        raw = io.StringIO()
        stream = LineRecords(logger, logging.WARNING, raw)
        assert stream.write("one\ntw") == 6
        stream.write("o\r\nthree")
        assert sink.getvalue() == "WARNING one\nWARNING two\n"
        stream.write("x" * MAX_LINE)  # a line with no end is cut into records, not hoarded
        assert sink.getvalue().endswith("WARNING three" + "x" * MAX_LINE + "\n")
        stream.write("tail")
        stream.close_line()
        assert sink.getvalue().endswith("WARNING tail\n")
        assert raw.getvalue() == ""  # nothing went around the records
    finally:
        logger.removeHandler(handler)


@pytest.mark.slow
def test_a_trainer_scripts_output_and_traceback_are_json_records(tmp_path: Path) -> None:
    """About 2 s: `elasticps --log-format json trainer SCRIPT`, as the launcher starts it."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")},
           "PYTHONPATH": str(REPO), "PADDLE_STORE": f"file://{tmp_path}/store.db",
           "PADDLE_JOB_NAME": "noisy", "PADDLE_JOB_TOKEN": "t" * 32, "PADDLE_TRAINER_ID": "1"}
    done = subprocess.run([sys.executable, "-m", "elasticps", "--log-format", "json", "trainer",
                           str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    lines = (done.stdout + done.stderr).splitlines()
    records = [json.loads(line) for line in lines]  # every line is a record
    assert {(r["job"], r["role"]) for r in records} == {("noisy", "trainer")}
    assert all(r["node"].startswith("trainer-1-") for r in records)
    said = [(r["logger"], r["level"], r["message"]) for r in records if "exc" not in r]
    assert [s for s in said if s[0] == "stdout"] == [
        ("stdout", "INFO", "hello from the script"), ("stdout", "INFO", "two"),
        ("stdout", "INFO", "lines"), ("stdout", "INFO", "last words, no newline")]
    assert ("stderr", "WARNING", "a line on stderr") in said
    (warning,) = [s for s in said if s[0] == "py.warnings"]
    assert "UserWarning: the learning rate looks high" in warning[2]
    failures = [r for r in records if "exc" in r]
    assert [r["message"] for r in failures] == [
        "An uncaught ZeroDivisionError ended thread loader: division by zero",
        "The trainer script noisy_script.py stopped on ValueError: bad row 7"]
    assert all(r["level"] == "ERROR" for r in failures)
    assert failures[1]["exc"].startswith("Traceback (most recent call last):")
    assert failures[1]["exc"].endswith("ValueError: bad row 7")
    assert 'noisy_script.py", line 16' in failures[1]["exc"]  # from the script down
    assert "runpy" not in failures[1]["exc"]
