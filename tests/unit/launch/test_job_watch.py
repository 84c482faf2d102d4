"""The launcher's watch: its progress line."""

from __future__ import annotations

from elasticps.launch.job_watch import render
from elasticps.store.keys import TrainerProgress


def test_progress_line_shows_pass_tasks_rate_and_loss() -> None:
    status = {"pass": 1, "num_passes": 3, "num_tasks": 32, "counts": {"done": 12},
              "state": "running"}
    progress = {"a": TrainerProgress(loss=0.5, samples=5),
                "b": TrainerProgress(loss=0.7, samples=9)}
    assert render(status, progress, 1234.0) == (
        "pass 2/3 | tasks 12/32 | trainers 2 | 1,234 samples/s | loss 0.6000 | running")
    assert render(None, {}, None) == "trainers 0"


def test_progress_line_counts_only_live_trainers() -> None:
    # "gone" was killed or scaled away: its progress key stays behind in the store.
    status = {"pass": 0, "live_trainers": ["a"]}
    progress = {"a": TrainerProgress(loss=0.5), "gone": TrainerProgress(loss=0.9)}
    assert render(status, progress, None) == "pass 1 | trainers 1 | loss 0.5000"
