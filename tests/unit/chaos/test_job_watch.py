"""What the chaos loop reads of a job's progress in its master's status document."""

from __future__ import annotations

from elasticps.chaos.job_watch import progress_of


def test_progress_counts_finished_tasks_and_recovery_dispatches() -> None:
    assert progress_of(None) is None
    assert progress_of({"state": "waiting_for_dataset", "done": False}) is None
    assert progress_of({"counts": {}, "tasks_finished_total": 7, "recoveries_total": 2}) == 9


def test_progress_is_any_mark_growing_not_a_total_that_a_dead_trainer_would_shrink() -> None:
    from elasticps.chaos.job_watch import progressed

    before = {"master": 4, "trainer a": 120, "trainer b": 80}
    assert not progressed(before, None)
    assert not progressed(before, {"master": 4, "trainer a": 120})  # b's record is gone
    assert progressed(before, {"master": 4, "trainer a": 121})  # a trained a batch more
    assert progressed(before, {"master": 4, "trainer c": 3})  # a replacement trained
    assert progressed(before, {"master": 5})  # a task finished
    assert not progressed(before, {"master": 3, "trainer a": 100, "trainer b": 80})
