"""`benchmarks/scale_sim.py --quick` as a smoke test: a real etcd, the real master, a real
pserver process and 8 or 16 simulated trainers finish every task once, without errors, and
the JSON carries the figures scripts read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

CONTRACT = ("task_round_trips_per_s", "push_rows_per_s", "pull_rows_per_s", "p50_ms", "p99_ms",
            "errors")


def test_quick_scale_simulation_completes_every_task_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "scale_sim.py"), "--quick",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {(r["trainers"], r["pservers"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(8, 0), (16, 0), (8, 1), (16, 1)}
    for (trainers, pservers), row in rows.items():
        assert all(key in row for key in CONTRACT), sorted(row)
        assert row["errors"] == 0, row
        assert row["job_state"] == "succeeded", row
        # --quick: 5 tasks per trainer for the master alone, 2 (of one batch) with pservers.
        assert row["tasks"] == trainers * (2 if pservers else 5), row
        assert row["task_round_trips_per_s"] > 0
        if pservers:
            assert row["steps"] == row["tasks"]
            assert row["push_rows_per_s"] > 0
            assert row["pull_rows_per_s"] > 0
            assert 0 < row["p50_ms"] <= row["p99_ms"]
            # The pserver process's own CPU, read from /proc: 16 or more pulls and pushes of
            # the 1.7 MB of dense values cost it far more than one 10 ms tick.
            assert row["pservers_cpu_s"] > 0, row
            pushed = row["push_rows_per_s"] * row["wall_s"]
            assert row["push_rows_per_pserver_cpu_s"] == pytest.approx(
                pushed / row["pservers_cpu_s"], rel=0.01)
        else:
            assert row["steps"] == 0
            assert row["push_rows_per_s"] == 0
            assert row["push_rows_per_pserver_cpu_s"] is None
    # The group commit's figures: every call settled, in fewer store transactions than calls.
    master_only = rows[(16, 0)]
    assert master_only["calls_per_txn"] is not None
    assert master_only["calls_per_txn"] >= 1.0, master_only
    # Where the master's CPU went, by thread (10 ms ticks): adds up to the process's CPU.
    by_thread = master_only["master_thread_cpu_ms_per_task"]
    assert by_thread, master_only
    assert min(by_thread.values()) >= 0, by_thread
    summed = sum(by_thread.values()) * master_only["tasks"] / 1e3
    assert abs(summed - master_only["master_cpu_s"]) <= 0.1 + 0.1 * master_only["master_cpu_s"]
