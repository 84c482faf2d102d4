"""What the chaos loop reads of a job's progress in its master's status document."""

from __future__ import annotations

from elasticps.chaos.observe import progress_of


def test_progress_counts_finished_tasks_and_recovery_dispatches() -> None:
    assert progress_of(None) is None
    assert progress_of({"state": "waiting_for_dataset", "done": False}) is None
    assert progress_of({"counts": {}, "tasks_finished_total": 7, "recoveries_total": 2}) == 9
