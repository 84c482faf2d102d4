"""A script run directly (``python train.py``) starts its job itself under ``elasticps run``,
like torchrun, and its exit code is the job's: the CTR example through ``launch_job``, and a
script of the seed's shape through the ``dist_train`` facade."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from elasticps.data.synth import synth_ctr
from tests.helpers import REPO


def test_running_the_script_directly_launches_a_local_job(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples/ctr/train.py"), "--trainers", "1", "--pservers",
         "1", "--workdir", str(workdir), "--rows", "3000", "--passes", "1", "--hidden", "8",
         "--max-vocab", "20"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, capture_output=True,
        text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("status: http://127.0.0.1:")
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["samples"] == 3000
    assert summary["trainers"] == 1
    assert (workdir / "model" / "manifest.json").exists()


def test_the_dist_train_facade_launches_the_job_and_trains_in_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    synth_ctr(str(data), 2000, seed=5, rows_per_chunk=250, max_vocab=20, num_crosses=0,
              progress=False)
    workdir = tmp_path / "job"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests/integration/trainer/scripts/seed_job.py"),
         "--data", str(data), "--workdir", str(workdir)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path, capture_output=True,
        text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    status = lines[0].removeprefix("status: ")
    assert status.startswith("http://127.0.0.1:")
    assert f"view job status at: {status}" in lines
    assert "job result: succeeded, exit code 0, 2000 samples by 2 trainers" in lines
    summary = json.loads((workdir / "summary.json").read_text())
    assert (summary["samples"], summary["trainers"]) == (2000, 2)
    trainer_logs = "".join(p.read_text() for p in (workdir / "logs").glob("trainer-*.log"))
    assert trainer_logs.count("trainer done: succeeded, ") == 2
