"""GetTask outcome -> what the trainer does: the pure policy, every outcome."""

from __future__ import annotations

import pytest

from elasticps.proto import master_pb2
from elasticps.trainer.task_policy import Action, Decision, decide

Outcome = master_pb2.GetTaskResponse.Outcome


def answer(outcome: int, **fields: object) -> master_pb2.GetTaskResponse:
    return master_pb2.GetTaskResponse(outcome=outcome, **fields)  # type: ignore[arg-type]


def test_a_task_is_trained() -> None:
    response = answer(Outcome.TASK, task=master_pb2.Task(task_id=3), pass_id=2)
    assert decide(response, 2) == Decision(Action.TRAIN, 2)


def test_a_task_answer_without_a_task_is_not_understood() -> None:
    decision = decide(answer(Outcome.TASK), 0)
    assert decision.action is Action.FAIL
    assert "without a task" in decision.reason


def test_retry_later_waits_in_the_same_pass() -> None:
    decision = decide(answer(Outcome.RETRY_LATER, pass_id=1, reason="2 task(s) are held"), 1)
    assert decision == Decision(Action.WAIT, 1, "2 task(s) are held")


@pytest.mark.parametrize(("hint", "taken"), [
    (0.05, 0.05), (60.0, 60.0), (0.0, 0.0),
    (-1.0, 0.0), (61.0, 0.0), (float("nan"), 0.0), (float("inf"), 0.0)])
def test_retry_later_takes_the_masters_hint_only_within_bounds(hint: float, taken: float) -> None:
    """A hint outside (0, 60 s] (negative, NaN, infinite, absurd) leaves the trainer's own
    backoff (0): a bad answer can neither spin a trainer nor park it for hours."""
    decision = decide(answer(Outcome.RETRY_LATER, retry_after_s=hint), 0)
    assert decision.action is Action.WAIT
    assert decision.retry_after_s == taken


@pytest.mark.parametrize(("asked", "current", "next_pass"), [(0, 1, 1), (0, 3, 3), (2, 1, 3)])
def test_pass_over_moves_forward_to_the_masters_pass_and_never_back(
        asked: int, current: int, next_pass: int) -> None:
    decision = decide(answer(Outcome.PASS_OVER, pass_id=current), asked)
    assert decision.action is Action.NEXT_PASS
    assert decision.pass_id == next_pass


def test_all_done_finishes() -> None:
    decision = decide(answer(Outcome.ALL_DONE, pass_id=2, reason="all 2 passes are done"), 1)
    assert decision == Decision(Action.FINISH, 1, "all 2 passes are done")


def test_job_failed_fails_with_the_masters_reason() -> None:
    decision = decide(answer(Outcome.JOB_FAILED, reason="3 of 10 tasks failed"), 0)
    assert decision == Decision(Action.FAIL, 0, "the master failed the job: 3 of 10 tasks failed")


@pytest.mark.parametrize("outcome", [Outcome.OUTCOME_UNSPECIFIED, 6, 99])
def test_an_unknown_outcome_fails_naming_it(outcome: int) -> None:
    decision = decide(answer(outcome), 0)
    assert decision.action is Action.FAIL
    assert decision.reason == f"the master answered GetTask with unknown outcome {outcome}"
