"""Events the training loop fires at the user's ``event_handler`` (the seed's v2 API shape).

A handler is any callable taking one event; dispatch on the class::

    def on_event(event):
        if isinstance(event, elasticps.events.EndIteration) and event.batch_id % 100 == 0:
            print(f"pass {event.pass_id} batch {event.batch_id} cost {event.cost:.4f}")
        if isinstance(event, elasticps.events.EndPass):
            print(f"pass {event.pass_id} auc {event.metrics['auc']:.4f}")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BeginPass:
    """This trainer starts working on pass ``pass_id``."""

    pass_id: int


@dataclass(frozen=True)
class EndIteration:
    """One batch was trained and its gradients pushed.

    ``batch_id`` counts this trainer's batches within the pass; ``task_id`` and ``seq`` name the
    batch globally (the BatchRef the push carried). ``metrics`` holds per-batch figures such as
    ``samples`` and ``logloss``.
    """

    pass_id: int
    batch_id: int
    cost: float
    metrics: dict[str, float] = field(default_factory=dict)
    task_id: int = -1
    seq: int = -1


@dataclass(frozen=True)
class EndPass:
    """Pass ``pass_id`` is over. ``metrics``: ``cost`` and ``samples`` over what this trainer
    trained in the pass (predictions made while training), plus the label kind's metrics:
    ``auc``, ``logloss`` (binary; multi_label: macro AUC), ``rmse``, ``mae`` (float),
    ``accuracy``, ``cross_entropy``, ``perplexity`` (class); see trainer/metrics.py. With a
    ``test_reader`` also the same metrics of the parameters at the pass end on the held-out set
    as ``test_<name>`` (``test_auc``...), ``test_samples``, and ``test_eval_s`` (seconds the
    evaluation took)."""

    pass_id: int
    metrics: dict[str, float] = field(default_factory=dict)


Event = BeginPass | EndIteration | EndPass
EventHandler = Callable[[Event], None]

__all__ = ["BeginPass", "EndIteration", "EndPass", "Event", "EventHandler"]
