"""``elasticps run --autoscale`` on a real job: it grows while there is work and an idle core,
judges the step by the job's samples/s, and shrinks again when the step did not pay (every
trainer waits on one shared resource, so a second one adds nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
# 30 tasks of 24 batches at 0.05 s a step: about 36 s for one trainer, and the same for two:
# a 10 s settling cooldown, 3 s asking, the step, a 10 s cooldown, the judgement, and room left.
ROWS, ROWS_PER_CHUNK = 90_000, 3_000


def test_autoscaling_grows_then_undoes_a_step_that_did_not_pay(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "elasticps", "data", "synth", "ctr", "--rows",
                    str(ROWS), "--rows-per-chunk", str(ROWS_PER_CHUNK), "--max-vocab", "100",
                    "--seed", "3", "--out", str(tmp_path / "data"), "--no-progress"],
                   env=ENV, check=True, capture_output=True, timeout=120)
    run = subprocess.run(
        [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "1",
         "--workdir", str(tmp_path / "job"), "--autoscale", "--min-trainers", "1",
         "--max-trainers", "2",
         "--autoscale-cpu", "0",  # the steps sleep: a busy test machine must not matter
         "--autoscale-cooldown", "10", "--autoscale-min-gain", "0.5",
         str(SCRIPTS / "shared_bottleneck.py"), "--data", str(tmp_path / "data"),
         "--lock", str(tmp_path / "resource.lock")],
        env=ENV, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    steps = [(r["trainers_from"], r["trainers_to"]) for r in summary["autoscale"]]
    assert steps == [(1, 2), (2, 1)], summary["autoscale"]
    grow, undo = summary["autoscale"]
    assert "tasks left" in grow["reason"]
    assert "did not pay" in undo["reason"]
    assert undo["elapsed_s"] - grow["elapsed_s"] >= 10.0  # the cooldown held
    # the launcher carried both out: a second trainer started, then left gracefully
    assert "autoscaler: 1 -> 2 trainers" in run.stderr
    assert "autoscaler: 2 -> 1 trainers" in run.stderr
    assert (tmp_path / "job" / "logs" / "trainer-1.log").exists()
    assert summary["samples"] >= ROWS  # every row trained (a leaving trainer hands its task back)
