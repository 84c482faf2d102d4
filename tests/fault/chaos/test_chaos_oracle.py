"""`elasticps chaos --oracle` as a user runs it (a scratch directory, no PYTHONPATH): the oracle's
counting model under SIGKILLs of every role and a store outage (its etcd SIGKILLed past every
lease TTL and restarted), then every (pass, row, shard) count read back from the parameters in
the shards' final checkpoints must be exactly 1."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elasticps.chaos.plan import KillRole, ScaleTrainers, preview
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from tests.fault.chaos.test_chaos_command import SEED, user_env

# Chaos runs time their recoveries against a bound and must land every fault before the
# job ends: they run alone, after the rest of the suite (scripts/test.sh).
pytestmark = pytest.mark.exclusive

ROWS, PASSES, PSERVERS = 100_000, 3, 2
OUTAGE_S = 6  # past every lease TTL (2 s); tests/fault/test_store_outage.py holds one > 10 s


@pytest.mark.slow
def test_the_oracle_counts_every_batch_once_through_kills_of_every_role_and_an_outage(
        tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed (scripts/setup.sh installs it)")
    assert {s.role for s in preview(SEED, 3, 2) if isinstance(s, KillRole)} == {
        "master", "pserver", "trainer"}
    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--oracle", "--kills", "3", "--seed",
         str(SEED), "--pservers", str(PSERVERS), "--skip-baseline", "--outage", str(OUTAGE_S),
         "--outage-after", "1", "--oracle-rows", str(ROWS), "--oracle-passes", str(PASSES),
         "--json", "report.json"],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=420, check=False)

    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["outcome"] == "succeeded"
    assert report["kills"] == {"master": 1, "pserver": 1, "trainer": 1}, chaos.stdout
    (outage,) = report["outages"]
    assert outage["down_s"] == OUTAGE_S
    assert outage["throughput_s"] is not None, report["outages"]
    assert report["oracle_rows_checked"] == PASSES * ROWS * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    result = report["oracle_result"]
    assert (result["counters_ok"], result["batch_mismatches"]) == (True, 0), result
    assert (report["duplicates"], report["missing"]) == (0, 0), report["accounting"]
    assert "every one exactly 1" in chaos.stderr


@pytest.mark.slow
def test_geo_deltas_are_applied_once_through_kills_of_every_role(tmp_path: Path) -> None:
    """Geo mode (trainers push parameter deltas covering a window of batches): each batch's
    change lands once per shard through a SIGKILL of each role, read from the parameters."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed (scripts/setup.sh installs it)")
    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--oracle", "--mode", "geo", "--kills", "3",
         "--seed", str(SEED), "--pservers", str(PSERVERS), "--outage", "0",
         "--oracle-rows", str(ROWS), "--oracle-passes", str(PASSES), "--json", "report.json"],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=420, check=False)

    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["outcome"] == "succeeded"
    assert report["kills"] == {"master": 1, "pserver": 1, "trainer": 1}, chaos.stdout
    logs = "".join(p.read_text() for p in (tmp_path / "chaos-run" / "chaos" / "logs").glob(
        "pserver-*.log"))
    assert "geo mode" in logs  # the job really ran in geo mode
    assert report["oracle_rows_checked"] == PASSES * ROWS * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    assert (report["duplicates"], report["missing"]) == (0, 0), report["accounting"]


@pytest.mark.slow
def test_a_resharding_from_2_to_3_and_back_applies_every_batch_once(tmp_path: Path) -> None:
    """`--reshard 3,2`: the job moves to 3 pservers and back to 2 while it trains, each move
    begun with a SIGKILL of a pserver (its pushes since its last checkpoint are lost, so the cut
    holds batches applied on one old shard only), among kills of other roles; every (pass, row,
    shard) count read from the final layout's parameters must be exactly 1."""
    rows, passes = 60_000, 2
    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--oracle", "--kills", "3", "--seed",
         str(SEED), "--pservers", "2", "--outage", "0", "--no-scale", "--reshard", "3,2",
         "--oracle-rows", str(rows), "--oracle-passes", str(passes), "--json", "report.json"],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=420, check=False)

    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(r["pservers"], r["serving_s"] is not None, bool(r["killed"]))
            for r in report["reshards"]] == [(3, True, True), (2, True, True)]
    assert report["oracle_rows_checked"] == passes * rows * 2
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    assert report["oracle_result"]["counters_ok"], report["oracle_result"]
    # The cut was real: some pushes after a resharding found part of their batch applied by
    # the layout before (pserver/reshard/lineage.py) and applied only the rest.
    url = str(tmp_path / "chaos-run" / "chaos" / "checkpoints")
    finals = [ShardCheckpoints(url, shard, 2).load_newest() for shard in range(2)]
    assert sum(f[0].counters.get("partly_applied_before", 0) for f in finals if f) > 0


def _oracle_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                      dict[str, Any]]:
    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--oracle", "--outage", "0", *args,
         "--json", "report.json"],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=240, check=False)
    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    return chaos, json.loads((tmp_path / "report.json").read_text())


def test_sync_rounds_count_every_batch_once_through_a_scale_up_and_kills(
        tmp_path: Path) -> None:
    """Sync mode (each round applies the mean of its batches): the oracle's Adagrad counting
    table reads exactly 1 per (pass, row, shard) whatever the rounds' sizes, through a scale
    step to 3 trainers, a pserver kill and a trainer kill, and every fault is followed by
    progress within the liveness bound."""
    rows, passes = 50_000, 2
    assert preview(221, 2, 2) == [ScaleTrainers(3), KillRole("pserver"), KillRole("trainer")]
    chaos, report = _oracle_run(tmp_path, "--mode", "sync", "--kills", "2", "--seed", "221",
                                "--oracle-rows", str(rows), "--oracle-passes", str(passes))
    assert report["outcome"] == "succeeded"
    assert [s["trainers"] for s in report["scales"]] == [3]
    assert report["kills"] == {"master": 0, "pserver": 1, "trainer": 1}, chaos.stdout
    assert report["oracle_rows_checked"] == passes * rows * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    shards = report["oracle_result"]["shards"]
    assert report["oracle_result"]["counters_ok"], shards
    # the rounds really averaged several batches (fewer rounds than batches on each shard)
    assert all(s["counter"] < s["counter_expected"] for s in shards), shards
    live = report["liveness"]
    assert live["ok"], live
    assert live["faults_timed"] == 3, live
    assert 0 < report["worst_progress_after_fault_s"] <= report["progress_bound_s"]


def test_geo_through_the_scale_down_kill_reshard_schedule_on_delta_checkpoints(
        tmp_path: Path) -> None:
    """Hole 1's sequence in geo mode: right after a pserver publishes a (delta) checkpoint the
    trainers are scaled down by one, that pserver is SIGKILLed and the job resharded 2 -> 3,
    all inside one recovery; every count read from the final layout's parameters is 1."""
    rows = 40_000
    # A checkpoint every second: the awaited one comes early in the pass, not as the pass ends
    # (at the default 3 s, a fast machine trains these rows before the schedule can act).
    chaos, report = _oracle_run(tmp_path, "--mode", "geo", "--kills", "1",
                                "--schedule", "scale-down-kill-reshard",
                                "--checkpoint-interval", "1",
                                "--checkpoint-deltas", "2", "--oracle-rows", str(rows),
                                "--oracle-passes", "1")
    assert report["outcome"] == "succeeded"
    assert report["schedule_steps"][0] == "AwaitCheckpoint()"
    assert [s["trainers"] for s in report["scales"]] == [1]
    assert report["kills"] == {"master": 0, "pserver": 1, "trainer": 0}, chaos.stdout
    assert [(r["pservers"], r["serving_s"] is not None) for r in report["reshards"]] == [
        (3, True)]
    assert report["oracle_rows_checked"] == rows * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    assert report["oracle_result"]["counters_ok"], report["oracle_result"]
    assert report["liveness"]["ok"], report["liveness"]
    # Deltas were written (the pservers' own log: the resharding removes the old layout's
    # files, and the new layout may end on full checkpoints only).
    logs = (tmp_path / "chaos-run" / "chaos" / "logs").glob("pserver*.log")
    assert any(", a delta of " in log.read_text() for log in logs)  # deltas written


def test_hybrid_applies_every_batch_once_through_a_trainer_and_a_pserver_kill(
        tmp_path: Path) -> None:
    """Hybrid mode (dense replicated on 2 trainers, averaged by the dense group; sparse rows on
    the pservers): a trainer SIGKILLed, then a pserver; the job succeeds, every (pass, row,
    shard) count of the sparse counting table is exactly 1, the dense counter (read from the
    trainers' final dense checkpoint) counts rounds, and the group re-formed after the kill."""
    rows = 40_000
    chaos, report = _oracle_run(tmp_path, "--mode", "hybrid", "--kills", "2", "--no-scale",
                                "--schedule", "kill-trainer-then-pserver", "--oracle-rows",
                                str(rows), "--oracle-passes", "1")
    assert report["outcome"] == "succeeded"
    assert report["kills"] == {"master": 0, "pserver": 1, "trainer": 1}, chaos.stdout
    assert report["oracle_rows_checked"] == rows * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    result = report["oracle_result"]
    assert (result["counters_ok"], result["batch_mismatches"]) == (True, 0), result
    assert (report["duplicates"], report["missing"]) == (0, 0), report["accounting"]
    logs = "".join(p.read_text() for p in (tmp_path / "chaos-run" / "chaos" / "logs").glob(
        "trainer-*.log"))
    assert "ends dense group generation" in logs
    assert report["liveness"]["ok"], report["liveness"]
