"""One training step on the pservers' parameters, with communication overlapped where asked.

Synchronous mode (``prefetch=False``): pull (dense when due, sparse rows of the batch), forward,
backward, push, wait for the push. A single trainer then computes exactly what a local PyTorch
run with the same optimizer would.

Overlapped mode (``prefetch=True``): one communication thread pulls batch k+1's rows (and dense
values when due) and pushes batch k while the main thread computes, in this order::

    comm:  pull(k+1) | push(k) | pull(k+2) | push(k+1) ...
    main:    compute(k)   |   compute(k+1)   | ...

so batch k+1's pulled values lack only batch k's own update (staleness 1, the usual price of
async SGD, which the pservers run anyway with several trainers). For the dense values, which
that staleness costs the most (0.008 test AUC on the CTR benchmark), ``own_update`` (an
:class:`~elasticps.trainer.own_update.OwnDenseUpdate`) runs batch k's update locally the way
the pservers do, so batch k+1 computes on the dense values the pservers hold once batch k is
applied (exactly, with one trainer); the sparse rows keep their staleness of one (0.001 AUC).
While this trainer's pushes are the only ones the pservers applied, ``dense_chain``
(dense_chain.py) knows the pull would bring back what the own update computed, and the pservers
answer it with "unchanged" instead of the values.

The sparse rows pulled for a batch are the ones its layers say they will look up
(:class:`~elasticps.trainer.sparse_rows.SparseTables`, one pull per table); the model is called
as ``model(batch)`` or through the trainer's ``feed`` (feed.py), in float32 or under bfloat16
autocast (precision.py), and the loss, computed in float32, and labels follow the dataset's
label kind (objective.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from elasticps.data.batch import Batch
from elasticps.errors import ConfigError
from elasticps.gradients import finite
from elasticps.proto import common_pb2
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.dense_chain import DenseChain
from elasticps.trainer.feed import Feed, call_model
from elasticps.trainer.metrics import to_host
from elasticps.trainer.objective import TrainingObjective
from elasticps.trainer.own_update import OwnDenseUpdate, corrected
from elasticps.trainer.precision import ComputePrecision
from elasticps.trainer.sparse_rows import PulledRows, SparseTables

if TYPE_CHECKING:
    from elasticps.trainer.hybrid.early_update import EarlyUpdate

log = logging.getLogger(__name__)


@dataclass
class StepResult:
    loss: float
    # The model's output (detached, on the host): shaped like the labels for a default loss,
    # as the model gave it for a user's (a tensor, or a tuple, list or dict of them).
    output: Any
    label: torch.Tensor  # the labels as the loss took them (on the host)


@dataclass
class _Prefetched:
    dense: dict[str, np.ndarray] | None
    sparse: dict[str, PulledRows]


def as_batch(batch: object) -> Batch:
    if not isinstance(batch, Batch):
        raise ConfigError(f"the trainer trains elasticps.data.Batch objects, not "
                          f"{type(batch).__name__} (readers yield them)")
    return batch


class StepRunner:
    """Runs batches of one model against one :class:`ParameterClient`."""

    def __init__(
        self,
        model: torch.nn.Module,
        objective: TrainingObjective,
        client: ParameterClient,
        dense: DenseSync,
        *,
        prefetch: bool = True,
        feed: Feed | None = None,
        tables: SparseTables | None = None,
        own_update: OwnDenseUpdate | None = None,
        dense_chain: DenseChain | None = None,
        on_flush: Callable[[], None] | None = None,
        dense_after_push: bool = False,
        early_update: EarlyUpdate | None = None,
        precision: ComputePrecision | None = None,
    ) -> None:
        self.model = model
        self.objective = objective
        self.client = client
        self.dense = dense
        self.prefetch = prefetch
        self.feed = feed
        self.tables = tables or SparseTables(model)
        self.tables.bind(client)  # the trainer unbinds them when it closes, not the runner
        # Show/click counts (SCORE tables) take clicks from 0/1 labels only.
        self.tables.clicks_from_label = objective.clicks_from_label
        self._comm = (ThreadPoolExecutor(1, thread_name_prefix="elasticps-comm")
                      if prefetch else None)
        self._next: Future[_Prefetched] | None = None
        self._next_batch: object | None = None
        self._push: Future[None] | None = None
        self.own_update = own_update if prefetch else None
        # Skipping unchanged dense pulls rests on the own update's exact replica.
        self.dense_chain = dense_chain if self.own_update is not None else None
        self.on_flush = on_flush  # geo mode: push the window's deltas (trainer/geo.py)
        # Hybrid mode: a prefetch brings the sparse rows only; the dense values are read when
        # the step starts, once the last push (its dense round) has landed: never stale.
        self.dense_after_push = dense_after_push
        # Hybrid mode, a lone trainer: its dense update computed as the backward pass goes.
        self.early_update = early_update
        self.precision = precision or ComputePrecision()
        # (dense values batch k ran on, the same after its update) until batch k+1 loads them
        self._own: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None
        self._step = 0
        # This trainer's own batches whose updates the last step's parameters lacked: 1 for
        # rows prefetched while the previous batch computed, plus the batches since the dense
        # values were pulled (dense_sync_every > 1). Read by the metrics at scrape time.
        self.staleness = 0
        self.staleness_sum = 0
        # Seconds spent per phase of run(), summed (the benchmark's profile).
        self.timers: dict[str, float] = dict.fromkeys(
            ("pull_wait", "load_params", "forward", "backward", "collect_grads", "push_wait"), 0.0)

    def _dense_due(self, step: int) -> bool:
        return step % self.dense.sync_every == 0

    def _pull(self, batch: Batch, step: int, dense: bool = True) -> _Prefetched:
        values = self._pull_dense() if dense and self._dense_due(step) else None
        return _Prefetched(values, self.tables.pull(self.client, batch))

    def _pull_dense(self) -> dict[str, np.ndarray]:
        if self.dense_chain is None or self.own_update is None:
            return self.client.pull_dense(self.dense.names)
        return self.dense_chain.pull(replica_fresh=self.own_update.fresh)

    def _push_tracked(self, ref: common_pb2.BatchRef, dense_grads: dict[str, np.ndarray],
                      sparse_grads: dict[str, tuple[np.ndarray, np.ndarray]],
                      counts: dict[str, tuple[np.ndarray, np.ndarray]],
                      after_own: dict[str, np.ndarray] | None) -> None:
        responses = self.client.push(ref, dense_grads, sparse_grads, counts)
        if self.dense_chain is not None:
            self.dense_chain.pushed(responses, after_own)

    def _fetch_current(self, batch: Batch, step: int) -> _Prefetched:
        if self._next is not None and self._next_batch is batch:
            fetched = self._next.result()
        else:
            fetched = self._pull(batch, step)
        self._next = None
        self._next_batch = None
        return fetched

    def run(self, batch: object, ref: common_pb2.BatchRef, next_batch: object | None) -> StepResult:
        """Train one batch and push its gradients (asynchronously when prefetching)."""
        batch = as_batch(batch)
        step = self._step
        self._step += 1
        t0 = time.perf_counter()
        prefetched = self._next is not None and self._next_batch is batch
        self.staleness = int(prefetched) + step % self.dense.sync_every
        self.staleness_sum += self.staleness
        if self._comm is None:
            fetched = self._pull(batch, step)
        else:
            if not prefetched:  # pulled now: let it see the last push, no correction needed
                self.wait_pushed()
                self._own = None
            fetched = self._fetch_current(batch, step)
            if self.dense_after_push and prefetched and self._dense_due(step):
                self.wait_pushed()
                fetched = _Prefetched(self._pull_dense(), fetched.sparse)
            if next_batch is not None:
                self._next = self._comm.submit(self._pull, as_batch(next_batch), step + 1,
                                               not self.dense_after_push)
                self._next_batch = next_batch
        t_pulled = time.perf_counter()
        own, self._own = self._own, None
        loaded = own[1] if own is not None else None
        if fetched.dense is not None:
            loaded = fetched.dense if own is None else corrected(fetched.dense, *own)
        if loaded is not None:
            self.dense.load(loaded)
        self.tables.install(fetched.sparse, batch, requires_grad=True)
        t1 = time.perf_counter()
        try:
            tensors = self.tables.placement.batch(batch)  # on the model's device
            self.model.train()
            self.dense.zero_grad()
            with self.precision.autocast():
                output = call_model(self.model, self.feed, tensors)
            scored = self.objective.score(self.precision.outputs(output), tensors)
            loss = scored.loss
            t_forward = time.perf_counter()
            if self.early_update is not None:
                self.early_update.begin(ref.step)
            loss.backward()
            t_backward = time.perf_counter()
            dense_grads = self.dense.grads()
            sparse_grads, counts = self.tables.grads_and_counts()
        finally:
            self.tables.clear()
        if self.own_update is not None and finite(dense_grads, sparse_grads):
            # What the batch ran on: the arrays just loaded into the module (load copies their
            # float32 bits as they are), kept as they are so that the next step's correction
            # knows a skipped pull's arrays by identity; the module's own values otherwise.
            ran_on = loaded if loaded is not None else self.dense.values()
            self._own = (ran_on, self.own_update.step(ran_on, dense_grads, ref.step))
        t2 = time.perf_counter()
        self.wait_pushed()
        if self._comm is None:
            self.client.push(ref, dense_grads, sparse_grads, counts)
        else:
            self._push = self._comm.submit(self._push_tracked, ref, dense_grads, sparse_grads,
                                           counts, self._own[1] if self._own else None)
        t3 = time.perf_counter()
        self.timers["pull_wait"] += t_pulled - t0
        self.timers["load_params"] += t1 - t_pulled
        self.timers["forward"] += t_forward - t1
        self.timers["backward"] += t_backward - t_forward
        self.timers["collect_grads"] += t2 - t_backward
        self.timers["push_wait"] += t3 - t2
        # The host's copies: metrics and event handlers read them with numpy.
        return StepResult(float(loss.detach()), to_host(scored.output), scored.label.cpu())

    def wait_pushed(self) -> None:
        """Block until the last push is applied; re-raise its error if it failed."""
        push, self._push = self._push, None
        if push is not None:
            push.result()

    def flush(self) -> None:
        """Every batch trained so far is applied on the pservers when this returns."""
        self.wait_pushed()
        if self.on_flush is not None:
            self.on_flush()

    def drop_prefetch(self) -> None:
        """Forget a prefetch for a batch that will not run (end of a task)."""
        nxt, self._next = self._next, None
        self._next_batch = None
        self._own = None
        if nxt is not None:
            nxt.exception()  # wait so the comm thread is idle; a failed prefetch is harmless

    def close(self) -> None:
        try:
            self.drop_prefetch()
            self.flush()
        finally:
            if self._comm is not None:
                self._comm.shutdown(wait=True)
