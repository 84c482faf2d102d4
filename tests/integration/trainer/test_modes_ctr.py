"""The CTR demo in each training mode: real ``elasticps run --mode M`` jobs (master, 2 pservers,
2 trainers as processes) on one small dataset. Each job trains every row once and exports a
model; geo and async reach a test AUC within 0.02 of sync's, and every mode learns (test AUC
above 0.75, where chance is 0.5 and the data's best is about 0.92; one pass over 12,000 rows
gives about 0.84-0.85 in every mode: benchmarks/modes.py measures the modes on more data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from elasticps.data.synth import synth_ctr
from tests.helpers import REPO

ROWS = 12_000
MODEL_ARGS = ["--passes", "1", "--hidden", "32,32", "--batch-size", "256", "--lr", "0.003"]


def _run(mode: str, data: Path, workdir: Path) -> dict[str, float]:
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
            "--mode", mode, "--workdir", str(workdir), "--grace", "5", "--standby-masters", "0",
            *(["--geo-steps", "4"] if mode == "geo" else []),
            str(REPO / "examples/ctr/train.py"), "--data", str(data), *MODEL_ARGS]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["samples"] == ROWS, summary  # every row trained exactly once
    return {"auc": float(summary["auc"]), "best": float(summary["best_auc"])}


def test_geo_and_async_converge_within_002_auc_of_sync(tmp_path: Path) -> None:
    data = tmp_path / "data"
    synth_ctr(str(data), ROWS, 7, test_rows=3_000, progress=False, max_vocab=5,
              num_crosses=0, signal=2.0)
    results = {mode: _run(mode, data, tmp_path / mode) for mode in ("sync", "async", "geo")}
    for mode, result in results.items():
        assert result["auc"] > 0.75, (mode, results)
        assert abs(result["auc"] - results["sync"]["auc"]) < 0.02, (mode, results)
    logs = (tmp_path / "sync" / "logs" / "pserver-0.log").read_text()
    assert "sync mode" in logs
