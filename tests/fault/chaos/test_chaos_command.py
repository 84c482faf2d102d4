"""`elasticps chaos` as a user runs it: from their own directory, on their own script (not the
repository's demo), with no PYTHONPATH. Real processes, real SIGKILLs: seed 148 kills the
leading master, a pserver and a trainer, with one scale step, and the job must still apply every
batch of every pass exactly once on every shard."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.chaos.plan import KillRole, ScaleTrainers, preview

# Chaos runs time their recoveries against a bound and must land every fault before the
# job ends: they run alone, after the rest of the suite (scripts/test.sh).
pytestmark = pytest.mark.exclusive

HERE = Path(__file__).resolve().parent
# 90 chunks x 3 passes: about 30 s under chaos on 2 cores, long enough for three kill cycles (a
# lease TTL of 2 s and a restart each) and a scale step. The trainer kill comes last, after the
# scale step has settled, and its replacement must register before the job ends: with 60 chunks
# an idle machine left 3 s to spare and a loaded one none (the job finished first).
ROWS, ROWS_PER_CHUNK, PASSES, PSERVERS = 180_000, 2_000, 3, 2
BATCH_SIZE = 128  # tiny_ctr.py's
SEED = 148  # master, pserver, a scale step to 3 trainers, trainer (tests/unit/chaos/test_plan.py)


def user_env() -> dict[str, str]:
    """The environment of a user's shell: no repository on the path, no job variables."""
    return {k: v for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith("PADDLE_")}


@pytest.mark.slow
def test_chaos_kills_every_role_of_a_users_job_and_it_stays_exactly_once(
        tmp_path: Path) -> None:
    assert [s.role if isinstance(s, KillRole) else s.trainers
            for s in preview(SEED, 3, 2)] == ["master", "pserver", 3, "trainer"]
    shutil.copy(HERE / "tiny_ctr.py", tmp_path / "train.py")
    subprocess.run([sys.executable, "-m", "elasticps", "data", "synth", "ctr", "--rows",
                    str(ROWS), "--rows-per-chunk", str(ROWS_PER_CHUNK), "--max-vocab", "200",
                    "--seed", "1", "--out", "data", "--no-progress"],
                   cwd=tmp_path, env=user_env(), check=True, capture_output=True, timeout=120)

    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--kills", "3", "--seed", str(SEED),
         "--pservers", str(PSERVERS), "--json", "report.json",
         "train.py", "--data", "data", "--passes", str(PASSES)],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=300, check=False)

    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["outcome"] == report["outcome_fault_free"] == "succeeded"
    assert report["kills"] == {"master": 1, "pserver": 1, "trainer": 1}, chaos.stdout
    assert [s["trainers"] for s in report["scales"]] == [
        s.trainers for s in preview(SEED, 3, 2) if isinstance(s, ScaleTrainers)]
    # The launcher saw each of those processes die of SIGKILL (its own log, not chaos's count).
    launcher_out = (tmp_path / "chaos-run" / "chaos.out").read_text()
    killed = {int(p) for p in re.findall(r"\(pid (\d+)\) exited with signal SIGKILL",
                                         launcher_out)}
    assert {k["pid"] for k in report["kill_log"]} <= killed, launcher_out[-3000:]
    for role in ("master", "pserver", "trainer"):
        assert report["recovery"][role]["serving"]["recovered"] == 1, report["recovery"]
    # Exactly once, against a model of the job: every batch of every chunk, pass and shard.
    batches = ROWS // ROWS_PER_CHUNK * math.ceil(ROWS_PER_CHUNK / BATCH_SIZE) * PASSES * PSERVERS
    assert report["expected_batches"] == batches
    assert (report["duplicates"], report["missing"]) == (0, 0), report["accounting"]
    assert all(p["complete"] for p in report["accounting"]["passes"])
    assert "survived 3 kills" in chaos.stderr
