"""A lone member's dense update, computed while the backward pass still runs (hybrid mode).

In a generation of one member a round's mean gradient is that member's own, so each table's
optimizer step can start as soon as autograd has accumulated the table's gradient: a worker
thread computes it beside the rest of the backward pass (numpy releases the GIL in its loops),
and the round that takes the batch commits it instead of computing it after the backward pass,
in series with the next step. The round itself is unchanged: it still plans (the batch may be a
duplicate, or skipped) and commits the early update only when the plan is this batch alone, at
the learning rate of its step, on the very state the update was computed from (the replica's
``version`` has not moved). Otherwise the early update is dropped and the round computes as
always. Both compute ``Optimizer.step`` on the same float32 values (the gradient exactly as
``DenseSync.grads`` gives it, the mean of one member being the gradient itself), so the state is
the same bit for bit either way.

Only a CPU trainer computes early: on a GPU, reading each gradient to the host as it lands
would stall the device's queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from elasticps.trainer.hybrid.replica import DenseReplica

Update = tuple[np.ndarray, dict[str, np.ndarray]]  # a table's new values and optimizer slots


@dataclass
class EarlyUpdates:
    """One batch's early updates: computed from replica ``version`` at ``batch_step``."""

    version: int
    batch_step: int
    futures: dict[str, Future[Update]] = field(default_factory=dict)

    def complete(self, tables: Iterable[str]) -> bool:
        """Whether every table has its update (a parameter the batch did not reach has
        none: its gradient is zeros, which only the round's own step applies)."""
        return set(self.futures) == set(tables)

    def results(self) -> dict[str, Update]:
        return {name: future.result() for name, future in self.futures.items()}

    def drop(self) -> None:
        for future in self.futures.values():
            future.cancel()


class EarlyUpdate:
    """Hooks on ``params`` that compute each table's update as its gradient lands, between
    :meth:`begin` (before ``loss.backward()``) and :meth:`take` (the push).

    ``solo()`` says whether this member is alone in its generation now (else nothing is
    computed: the mean is not known before the round); ``grad_of(grad)`` is the host
    float32 gradient the push would carry (``DenseSync.host_grad``).
    """

    def __init__(self, replica: DenseReplica, lock: threading.Condition,
                 params: dict[str, torch.nn.Parameter], solo: Callable[[], bool],
                 grad_of: Callable[[torch.Tensor], np.ndarray]) -> None:
        self.replica, self.lock, self.solo, self.grad_of = replica, lock, solo, grad_of
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="dense-early")
        self._current: EarlyUpdates | None = None
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(name))
                         for name, p in params.items()]
        self.committed = 0  # rounds that took an early update (tests, logs)

    def begin(self, batch_step: int) -> None:
        """The next backward pass is batch ``batch_step``'s: compute its updates early."""
        self._drop()
        if not self.solo():
            return
        with self.lock:
            self._current = EarlyUpdates(self.replica.version, batch_step)

    def take(self) -> EarlyUpdates | None:
        """This batch's early updates (None: none were computed), for the round to judge."""
        current, self._current = self._current, None
        return current

    def close(self) -> None:
        self._drop()
        for handle in self._handles:
            handle.remove()
        self._worker.shutdown(wait=True)

    def _drop(self) -> None:
        current, self._current = self._current, None
        if current is not None:
            current.drop()

    def _hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def landed(param: torch.Tensor) -> None:
            current = self._current
            if current is None or param.grad is None:
                return
            grad = self.grad_of(param.grad).reshape(-1)
            current.futures[name] = self._worker.submit(self._compute, name, grad,
                                                        current.batch_step)
        return landed

    def _compute(self, name: str, grad: np.ndarray, batch_step: int) -> Update:
        # The table's state as the replica holds it: a round replaces arrays, never writes
        # into them, and one that ran since begin() shows in the version the commit checks.
        table = self.replica.tables[name]
        return table.compute(grad, batch_step)


__all__ = ["EarlyUpdate", "EarlyUpdates"]
