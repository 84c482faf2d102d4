"""``dist_train`` called outside a job (``python train.py``) starts the job itself under
``elasticps run``, like torchrun, and the script's exit code is the job's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
