"""`benchmarks/ctr_throughput.py --quick` as a smoke test: a real `elasticps run` job and the
PyTorch baseline in one invocation, and the report's contract: speeds, AUCs, the ratio, and
the CPU seconds per 1,000 samples of every role read from the job's processes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO

BENCH = REPO / "benchmarks" / "ctr_throughput.py"


@pytest.mark.slow
def test_the_quick_run_reports_speed_auc_and_every_roles_cpu_per_sample(tmp_path: Path) -> None:
    out = tmp_path / "ctr.json"
    run = subprocess.run([sys.executable, str(BENCH), "--quick", "--mode", "async",
                          "--bf16-cost", "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "async"
    assert report["elasticps_sps"] > 0
    assert report["torch_sps"] > 0
    assert report["ratio"] == pytest.approx(report["elasticps_sps"] / report["torch_sps"],
                                            abs=0.002)
    assert 0.5 < report["auc_elasticps"] < 1
    assert 0.5 < report["auc_torch"] < 1
    assert report["torch_threads"] >= 1
    assert report["elasticps_threads"]["trainer"] >= 1
    cpu = report["cpu_s_per_1k"]
    for role in ("trainer", "pserver", "master", "launcher"):
        assert cpu[role] > 0, role  # every role process was found and read
    # The job's total is exact (the launcher's reaped children); the roles' readings are
    # taken while they run, so they can only fall short of it.
    roles = sum(cpu[r] for r in ("trainer", "pserver", "master", "launcher"))
    assert roles <= cpu["job"] + 1e-3
    assert cpu["job"] == pytest.approx(roles + cpu["unread"], rel=1e-3)
    assert report["torch_cpu_s_per_1k"] > 0
    assert report["torch_1thread_cpu_s_per_1k"] > 0
    assert "CPU s per 1,000 samples, whole run: elasticps trainer" in run.stdout
    # The same job with bfloat16 dense gradients: its own speed and AUC, beside float32's.
    assert report["bf16_sps"] > 0
    assert report["bf16_over_float32"] == pytest.approx(
        report["bf16_sps"] / report["elasticps_sps"], abs=0.002)
    assert abs(report["auc_bf16"] - report["auc_elasticps"]) < 0.02


@pytest.mark.slow
def test_a_bfloat16_run_compares_like_for_like_and_beside_pytorch_in_float32(
        tmp_path: Path) -> None:
    out = tmp_path / "ctr.json"
    run = subprocess.run([sys.executable, str(BENCH), "--quick", "--mode", "hybrid",
                          "--compute-dtype", "bfloat16", "--json", str(out)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["compute_dtype"] == "bfloat16"
    assert report["torch_float32_sps"] > 0
    assert report["ratio_vs_torch_float32"] == pytest.approx(
        report["elasticps_sps"] / report["torch_float32_sps"], abs=0.002)
    for key in ("auc_elasticps", "auc_torch"):  # bfloat16 products learn as float32 ones
        assert abs(report[key] - report["auc_torch_float32"]) < 0.02, key
    assert "elasticps in bfloat16 / PyTorch in float32" in run.stdout


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ctr_throughput", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_mode_this_elasticps_does_not_know_stops_at_once_saying_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A mode this checkout does not know: exit 2 and a sentence, not a traceback from deep
    inside a job (the check is made before any data is written or run)."""
    bench = load_benchmark()
    with pytest.raises(SystemExit) as stopped:
        bench.check_mode("a-mode-no-elasticps-knows")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--mode a-mode-no-elasticps-knows is unknown to this elasticps" in err
    assert "it knows async, sync, geo" in err
    bench.check_mode("async")  # a known one passes
    bench.check_mode("hybrid")
