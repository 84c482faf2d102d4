"""LaunchedJob.finish: a job that does not end in time is stopped, and the harness says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from elasticps.chaos.job import LaunchedJob
from elasticps.chaos.options import ChaosOptions


def test_a_job_stopped_early_is_reported_with_the_reason_given(tmp_path: Path) -> None:
    job = LaunchedJob(ChaosOptions(script=Path("train.py")), tmp_path, tmp_path / "out")
    # Stands in for the launcher: a process that would outlive the wait and stops on SIGINT
    # (as the launcher does; a shell's background job inherits SIGINT ignored, so say so).
    job.proc = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, "
         "signal.default_int_handler); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    assert job.proc.stdout is not None
    assert job.proc.stdout.readline() == "ready\n"  # its handler is in place
    said: list[str] = []
    run = job.finish(0.0, said.append, "no training progress for 61s after the last fault")
    assert said == [f"chaos: stopping the job: no training progress for 61s after the last "
                    f"fault (output in {tmp_path / 'out'})"]
    assert run.exit_code != 0
    assert job.proc.poll() is not None
    job.proc.stdout.close()
