"""What a trainer does with the master's answer to GetTask: a pure decision, no I/O.

::

    TASK         -> TRAIN      train the task in the answer
    RETRY_LATER  -> WAIT       others hold the rest of the pass: back off, ask again (after
                               the master's ``retry_after_s`` when it gives one)
    PASS_OVER    -> NEXT_PASS  close this pass, work on the pass the master names
    ALL_DONE     -> FINISH     close this pass and stop: every pass is done
    JOB_FAILED   -> FAIL       the master failed the job; the reason says why
    anything else-> FAIL       an answer this trainer does not understand

:class:`~elasticps.trainer.task_loop.TaskLoop` carries the decision out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from elasticps.proto import master_pb2

Outcome = master_pb2.GetTaskResponse.Outcome
MAX_RETRY_AFTER_S = 60.0  # the longest "ask again after" a trainer takes from the master


class Action(enum.Enum):
    TRAIN = "train"
    WAIT = "wait"
    NEXT_PASS = "next_pass"
    FINISH = "finish"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    action: Action
    pass_id: int  # the pass to work on after acting
    reason: str = ""  # why (the master's words), for WAIT, FINISH and FAIL
    retry_after_s: float = 0.0  # WAIT: the master's hint of when to ask again (0: none)


def decide(response: master_pb2.GetTaskResponse, pass_id: int) -> Decision:
    """The action for ``response`` to ``get_task(pass_id)``."""
    outcome = response.outcome
    if outcome == Outcome.TASK:
        if not response.HasField("task"):
            return Decision(Action.FAIL, pass_id, "the master answered TASK without a task")
        return Decision(Action.TRAIN, pass_id)
    if outcome == Outcome.RETRY_LATER:
        hint = response.retry_after_s
        # A hint outside (0, MAX_RETRY_AFTER_S] (NaN, negative, absurd) leaves the backoff.
        return Decision(Action.WAIT, pass_id, response.reason,
                        hint if 0.0 < hint <= MAX_RETRY_AFTER_S else 0.0)
    if outcome == Outcome.PASS_OVER:
        # Never back, never the same pass again: a stale answer still moves us forward.
        return Decision(Action.NEXT_PASS, max(response.pass_id, pass_id + 1), response.reason)
    if outcome == Outcome.ALL_DONE:
        return Decision(Action.FINISH, pass_id, response.reason)
    if outcome == Outcome.JOB_FAILED:
        return Decision(Action.FAIL, pass_id, f"the master failed the job: {response.reason}")
    return Decision(Action.FAIL, pass_id,
                    f"the master answered GetTask with unknown outcome {outcome}")
