"""A job's result without internals, in real jobs under ``elasticps run`` (2 trainers, 1 pserver):
a script that publishes nothing still leaves the last pass's test metrics in summary.json, and
one that calls ``elasticps.publish_result`` after evaluating with ``Trainer.evaluate`` (after
``dist_train``) gets exactly its own document there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elasticps.data.synth import synth_ctr
from tests.helpers import REPO

SCRIPT = REPO / "tests/integration/trainer/scripts/result_job.py"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("results") / "data"
    synth_ctr(str(out), 4000, seed=3, test_rows=1500, rows_per_chunk=500, max_vocab=20,
              num_crosses=0, signal=2.0, progress=False)
    return out


def run_job(workdir: Path, data: Path, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "1",
            "--workdir", str(workdir), "--grace", "5", str(SCRIPT), "--data", str(data), *extra]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((workdir / "summary.json").read_text())
    assert isinstance(summary, dict)
    if summary.get("auc") is not None:
        assert f"final test auc {summary['auc']:.4f}" in proc.stdout
    return summary


def test_without_a_published_result_summary_has_the_last_pass_test_metrics(
        tmp_path: Path, data: Path) -> None:
    summary = run_job(tmp_path / "job", data)
    assert summary["label_kind"] == "binary"
    assert summary["passes"] == 2
    assert str(summary["result_by"]).startswith("trainer-")
    assert len(summary["pass_test_auc"]) == 2
    assert summary["auc"] == summary["pass_test_auc"][-1]
    assert 0.6 < summary["auc"] <= 1.0  # the planted signal is strong: the model learnt it
    assert summary["logloss"] == summary["pass_test_logloss"][-1]
    assert summary["test_samples"] == 1500
    assert 0.5 < summary["train_auc"] <= 1.0  # training metrics, never under the plain names
    assert summary["samples"] == 2 * 4000  # the launcher's own figure is not overwritten


def test_a_published_result_replaces_it_and_evaluate_works_after_dist_train(
        tmp_path: Path, data: Path) -> None:
    summary = run_job(tmp_path / "job", data, "--publish")
    assert summary["mine"] is True
    assert "result_by" not in summary  # the automatic result was replaced, not merged
    assert summary["passes"] == 2  # the script's result does not say; the trainers did
    assert summary["not_a_number"] is None  # JSON has no NaN
    by_reader, by_batches = summary["by_reader"], summary["by_batches"]
    end_pass = summary["end_pass"]
    assert by_reader["samples"] == by_batches["samples"] == 1500
    # After the last pass every push is applied: evaluating again gives the pass-end metrics.
    assert by_reader["auc"] == pytest.approx(end_pass["test_auc"], abs=1e-12)
    assert by_batches["auc"] == pytest.approx(by_reader["auc"], abs=1e-12)
    assert by_reader["logloss"] == pytest.approx(end_pass["test_logloss"], rel=1e-6)
    assert summary["auc"] == by_reader["auc"]
