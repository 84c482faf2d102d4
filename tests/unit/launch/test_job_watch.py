"""The launcher's watch: its progress line."""

from __future__ import annotations

from elasticps.launch.job_watch import snapshot
from elasticps.store.keys import TrainerProgress


def test_progress_line_shows_pass_tasks_rate_and_loss() -> None:
    status = {"pass": 1, "num_passes": 3, "num_tasks": 32, "counts": {"done": 12},
              "state": "running"}
    progress = {"a": TrainerProgress(loss=0.5, samples=5),
                "b": TrainerProgress(loss=0.7, samples=9)}
    assert snapshot(status, progress, 1234.0).line == (
        "pass 2/3 | running | tasks 12/32 | trainers 2 | 1,234 samples/s | loss 0.6000")
    assert snapshot(None, {}, None).line == "starting | trainers 0"


def test_progress_line_counts_only_live_trainers() -> None:
    # "gone" was killed or scaled away: its progress key stays behind in the store.
    status = {"pass": 0, "live_trainers": ["a"], "state": "running"}
    progress = {"a": TrainerProgress(loss=0.5), "gone": TrainerProgress(loss=0.9,
                                                                       stage="exporting")}
    assert snapshot(status, progress, None).line == "pass 1 | running | trainers 1 | loss 0.5000"
