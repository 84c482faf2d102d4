"""The chaos harness sizes its job from the number of kills asked for."""

from __future__ import annotations

from elasticps.chaos.harness import (
    MIN_ROWS,
    ROWS_PER_KILL,
    TRAIN_S_PER_KILL,
    ChaosOptions,
    job_rows,
    leader_pid,
    plan_rows,
)


def test_rows_default_grows_with_kills_and_an_explicit_size_wins() -> None:
    assert job_rows(ChaosOptions(kills=2)) == MIN_ROWS
    assert job_rows(ChaosOptions(kills=40)) == 40 * ROWS_PER_KILL
    assert job_rows(ChaosOptions(kills=40, rows=5000)) == 5000


def test_a_job_too_short_for_its_kills_is_scaled_up_to_fit() -> None:
    opts = ChaosOptions(kills=20)
    needed = TRAIN_S_PER_KILL * 20
    rows = plan_rows(opts, train_s=needed / 4)
    assert rows is not None
    assert rows >= 4 * job_rows(opts)
    assert rows % 10_000 == 0
    assert plan_rows(opts, train_s=needed + 1) is None  # already long enough
    assert plan_rows(ChaosOptions(kills=20, rows=1000), train_s=1.0) is None  # user's size
    assert plan_rows(opts, train_s=None) is None


def test_leader_pid_matches_the_node_name_of_the_published_master() -> None:
    assert leader_pid("master-host-a-123", [12, 123, 1234]) == 123
    assert leader_pid("master-host-9", [12]) is None
    assert leader_pid(None, [1]) is None
