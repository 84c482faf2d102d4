"""`elasticps chaos --oracle --stream` as a user runs it: the oracle's partitions land every 2 s
while every role is SIGKILLed in turn right as a partition commits (the directed schedule
stream-commit-kill-every-role: the leading master, pserver 0, a trainer); every row of every
partition must be applied exactly once per shard, read from
the shards' final checkpoints, every partition trained through within the stream's liveness
bound of its commit, and the master's records must hold each partition once, in order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from elasticps.chaos.stream_writer import partition_name
from elasticps.launch.scale import job_location
from elasticps.master.stream_records import load_stream
from elasticps.store import open_store
from tests.fault.chaos.test_chaos_command import user_env

# Chaos runs time their recoveries against a bound and must land every fault before the
# job ends: they run alone, after the rest of the suite (scripts/test.sh).
pytestmark = pytest.mark.exclusive

# 14 partitions of 4,000 rows (two chunks, two tasks each) landing 2 s apart: a 26 s stream,
# long enough for the three directed kills (each waits for a commit, then about 5 s of
# recovery on 2 cores).
PARTITIONS, ROWS, PSERVERS = 14, 4_000, 2


@pytest.mark.slow
def test_every_row_of_every_partition_is_applied_once_while_partitions_land_under_kills(
        tmp_path: Path) -> None:
    chaos = subprocess.run(
        [sys.executable, "-m", "elasticps", "chaos", "--oracle", "--stream",
         "--stream-partitions", str(PARTITIONS), "--stream-interval", "2",
         "--oracle-rows", str(PARTITIONS * ROWS), "--oracle-rows-per-chunk", "2000",
         "--schedule", "stream-commit-kill-every-role", "--kills", "3", "--seed", "8",
         "--no-scale", "--outage", "0", "--pservers", str(PSERVERS), "--json", "report.json"],
        cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=300, check=False)

    assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["outcome"] == "succeeded"
    assert report["kills"] == {"master": 1, "pserver": 1, "trainer": 1}, chaos.stdout
    assert report["schedule_steps"] == [
        "AwaitPartition()", "KillMaster(then='progress')", "AwaitPartition()",
        "KillPServer(slot=0, then='progress')", "AwaitPartition()",
        "KillTrainer(then='progress')"]
    # Each role died right as a partition committed (within the writer's own second of it).
    stream = report["stream"]
    assert [k["role"] for k in report["kill_log"]] == ["master", "pserver", "trainer"]
    for kill in report["kill_log"]:
        since_commit = [kill["at"] - landing["landed_at"] for landing in stream["landings"]]
        assert min(s for s in since_commit if s >= 0) < 1.0, (kill, since_commit)
    # Every partition landed and was trained through within the bound of its commit.
    assert (stream["landed"], stream["ended"], stream["over_bound"]) == (PARTITIONS, True, [])
    assert stream["ok"], stream
    assert 0 < stream["worst_trained_s"] <= stream["bound_s"]
    assert report["liveness"]["ok"], report["liveness"]
    # The oracle: every (row, shard) of the stream counted exactly once in the parameters.
    assert report["oracle_rows_checked"] == PARTITIONS * ROWS * PSERVERS
    assert report["oracle_mismatches"] == 0, report["oracle_result"]
    result = report["oracle_result"]
    assert (result["counters_ok"], result["batch_mismatches"]) == (True, 0), result
    assert (report["duplicates"], report["missing"]) == (0, 0), report["accounting"]
    # The master's records: each partition appended once, in order, whoever led.
    with open_store(*job_location(str(tmp_path / "chaos-run" / "chaos"), None, None)) as store:
        position, partitions = load_stream(store)
    assert [p.name for p in partitions] == [partition_name(i) for i in range(PARTITIONS)]
    assert position.last == partition_name(PARTITIONS - 1)
