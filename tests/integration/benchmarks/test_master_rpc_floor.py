"""`benchmarks/master_rpc_floor.py` as a smoke test: real TLS callers in another process get
every answer of the do-nothing master server, and the JSON carries its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def test_floor_benchmark_answers_every_call_and_reports_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "floor.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "master_rpc_floor.py"),
                          "--clients", "4", "--calls", "5", "--processes", "2",
                          "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    row = json.loads(out.read_text())
    assert row["calls"] == 20
    assert row["errors"] == 0
    assert row["calls_per_s"] > 0
    assert row["server_cpu_ms_per_call"] > 0
