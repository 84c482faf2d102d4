"""`benchmarks/examples_start.py --quick` as a smoke test: one example really runs under
`elasticps run`, its first batch is read from the job's logs, and the JSON and the printed table
carry the figures docs/examples.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

EXAMPLE = ("shows", "command", "runs", "first_batch_s", "end_s", "first_batch_ratio",
           "end_ratio")


@pytest.mark.slow
def test_quick_run_of_one_example_reports_its_first_batch_before_its_end(tmp_path: Path) -> None:
    out = tmp_path / "examples.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "examples_start.py"),
                          "--quick", "--examples", "ctr", "--repeat", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["cpu_model"]
    assert (report["trainers"], report["pservers"], report["repeat"]) == (1, 1, 1)
    assert list(report["examples"]) == ["ctr"]
    ctr = report["examples"]["ctr"]
    assert all(key in ctr for key in EXAMPLE), sorted(ctr)
    assert ctr["command"].startswith(
        "elasticps run --trainers 1 --pservers 1 --workdir W examples/ctr/train.py")
    assert 0 < ctr["first_batch_s"] < ctr["end_s"], ctr
    # The first batch is the trainer log line's time, after the job's roles came up in it.
    [job] = ctr["runs"]
    stages = job["stages"]
    assert job["first_batch_s"] == stages["first batch"]
    assert 0 < stages["master serves"] <= stages["first batch"] <= stages["all passes done"] \
        <= stages["job end"] == job["end_s"], stages
    assert job["cpu_sum_s"] > 0, job
    reference = report["plain_torch"]
    assert 0 < reference["first_batch_s"] < reference["end_s"], reference
    assert ctr["first_batch_ratio"] == pytest.approx(
        ctr["first_batch_s"] / reference["first_batch_s"], abs=0.01)
    assert any(line.startswith("ctr ") for line in run.stdout.splitlines()), run.stdout


def test_an_unknown_example_is_refused_by_name() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "examples_start.py"),
                          "--examples", "ctr,nope"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "'nope'" in run.stderr
    assert "ctr" in run.stderr
