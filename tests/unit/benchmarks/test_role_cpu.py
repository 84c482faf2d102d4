"""`benchmarks/role_cpu.py`'s training window: the progress records it is read between."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))  # role_cpu and its thread_cpu, by bare name
from role_cpu import JobCpuWatch


def _watch(progress: dict[float, int], cpu: dict[float, float]) -> JobCpuWatch:
    watch = JobCpuWatch(Path("/nonexistent"), launcher_pid=1)
    watch.roles = {1: "launcher", 2: "trainer"}
    watch.progress = dict(progress)
    watch.series = [(t, {2: c}) for t, c in sorted(cpu.items())]
    return watch


def test_the_training_window_leaves_out_the_start_and_the_end() -> None:
    """Records at 0 and at the total (before the first batch, after the last) are outside;
    the speed and the CPU are those between the first and last records inside."""
    watch = _watch({10.0: 0, 11.0: 1000, 13.0: 9000, 15.0: 17000, 30.0: 20000},
                   {10.0: 0.0, 11.0: 1.0, 15.0: 5.0, 30.0: 20.0})
    assert watch.samples_per_s_training(20000) == pytest.approx(16000 / 4.0)
    samples, spent = watch.while_training(20000)  # type: ignore[misc]
    assert samples == 16000
    assert spent["trainer"] == pytest.approx(4.0)


def test_a_run_too_short_for_two_records_has_no_window() -> None:
    watch = _watch({10.0: 0, 11.0: 1000, 12.0: 5000}, {10.0: 0.0, 12.0: 2.0})
    assert watch.samples_per_s_training(5000) is None
    assert watch.while_training(5000) is None
