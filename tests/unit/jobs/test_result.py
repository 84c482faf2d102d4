"""JobResult: one meaning for every backend, and no result that contradicts itself."""

from __future__ import annotations

import pytest

from elasticps.errors import ConfigError
from elasticps.jobs.api import JobResult


@pytest.mark.parametrize(("code", "state", "succeeded"), [
    (0, "succeeded", True), (1, "failed", False), (2, "failed", False),
    (130, "interrupted", False)])
def test_a_launcher_exit_code_is_the_state_elasticps_run_ended_in(code: int, state: str,
                                                                  succeeded: bool) -> None:
    result = JobResult.from_exit_code(code, {"auc": 0.7} if succeeded else None)
    assert (result.state, result.exit_code, result.succeeded) == (state, code, succeeded)
    assert result.summary == ({"auc": 0.7} if succeeded else {})


@pytest.mark.parametrize(("state", "code", "match"), [
    ("succeeded", 1, "state succeeded cannot have exit code 1"),
    ("failed", 0, "state failed cannot have exit code 0"),
    ("Completed", 0, "one of succeeded, failed, interrupted, not 'Completed'")])
def test_a_result_that_contradicts_itself_is_refused(state: str, code: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        JobResult(state, code)
