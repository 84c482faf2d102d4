"""One training step on the pservers' parameters, with communication overlapped where asked.

Synchronous mode (``prefetch=False``): pull (dense when due, sparse rows of the batch), forward,
backward, push, wait for the push. A single trainer then computes exactly what a local PyTorch
run with the same optimizer would.

Overlapped mode (``prefetch=True``): one communication thread pulls batch k+1's rows (and dense
values when due) and pushes batch k while the main thread computes, in this order::

    comm:  pull(k+1) | push(k) | pull(k+2) | push(k+1) ...
    main:    compute(k)   |   compute(k+1)   | ...

so batch k+1 is computed on parameters that lack only batch k's own update (staleness 1, the
usual price of async SGD, which the pservers run anyway with several trainers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from elasticps.data.batch import Batch
from elasticps.data.criteo_layout import SPARSE_COLUMNS
from elasticps.proto import common_pb2
from elasticps.trainer.api import ParameterClient
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.sparse import SparseEmbedding

log = logging.getLogger(__name__)

# Maps a batch to the model's positional inputs, its labels, and each sparse table's ids.
Feed = Callable[[object], tuple[Sequence[torch.Tensor], torch.Tensor]]
SparseIds = Callable[[object], Mapping[str, np.ndarray]]


@dataclass
class StepResult:
    loss: float
    probs: np.ndarray  # sigmoid of the model's logits, [B]
    labels: np.ndarray  # [B]


@dataclass
class _Prefetched:
    dense: dict[str, np.ndarray] | None
    sparse: dict[str, tuple[np.ndarray, np.ndarray]]


def ctr_feed(batch: object) -> tuple[Sequence[torch.Tensor], torch.Tensor]:
    """Default feed for a Criteo-layout :class:`~elasticps.data.batch.Batch`:
    ``model(dense, sparse)`` (sparse = the 26 slots' ids side by side) against ``label``."""
    assert isinstance(batch, Batch)
    dense = torch.from_numpy(np.ascontiguousarray(batch.dense, dtype=np.float32))
    sparse = torch.from_numpy(batch.stack_ids(SPARSE_COLUMNS))
    label = torch.from_numpy(np.ascontiguousarray(batch.label, dtype=np.float32))
    return (dense, sparse), label


class StepRunner:
    """Runs batches of one model against one :class:`ParameterClient`."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        client: ParameterClient,
        dense: DenseSync,
        *,
        prefetch: bool = True,
        feed: Feed = ctr_feed,
        sparse_ids: SparseIds | None = None,
    ) -> None:
        self.model = model
        self.loss_fn = loss_fn
        self.client = client
        self.dense = dense
        self.prefetch = prefetch
        self.feed = feed
        self.layers: dict[str, list[SparseEmbedding]] = {}
        for module in model.modules():
            if isinstance(module, SparseEmbedding):
                module.bind(client)
                self.layers.setdefault(module.table_name, []).append(module)
        self.sparse_ids = sparse_ids or self._all_tables_read_sparse
        self._comm = (ThreadPoolExecutor(1, thread_name_prefix="elasticps-comm")
                      if prefetch else None)
        self._next: Future[_Prefetched] | None = None
        self._next_batch: object | None = None
        self._push: Future[None] | None = None
        self._step = 0
        # Seconds spent per phase of run(), summed (the benchmark's profile).
        self.timers: dict[str, float] = dict.fromkeys(
            ("pull_wait", "load_params", "forward", "backward", "collect_grads", "push_wait"), 0.0)

    def _all_tables_read_sparse(self, batch: object) -> Mapping[str, np.ndarray]:
        ids = batch.stack_ids(SPARSE_COLUMNS) if isinstance(batch, Batch) \
            else batch.sparse  # type: ignore[attr-defined]
        return {table: ids for table in self.layers}

    def _dense_due(self, step: int) -> bool:
        return step % self.dense.sync_every == 0

    def _pull(self, batch: object, step: int) -> _Prefetched:
        dense = self.client.pull_dense(self.dense.names) if self._dense_due(step) else None
        sparse: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for table, ids in self.sparse_ids(batch).items():
            layer = self.layers[table][0]
            uniq, _ = layer.unique_ids(ids)
            sparse[table] = (uniq, self.client.pull_sparse(table, uniq))
        return _Prefetched(dense, sparse)

    def _apply(self, fetched: _Prefetched) -> None:
        if fetched.dense is not None:
            self.dense.load(fetched.dense)
        for table, (uniq, rows) in fetched.sparse.items():
            for layer in self.layers[table]:
                layer.offer(uniq, rows)

    def _fetch_current(self, batch: object, step: int) -> _Prefetched:
        if self._next is not None and self._next_batch is batch:
            fetched = self._next.result()
        else:
            fetched = self._pull(batch, step)
        self._next = None
        self._next_batch = None
        return fetched

    def run(self, batch: object, ref: common_pb2.BatchRef, next_batch: object | None) -> StepResult:
        """Train one batch and push its gradients (asynchronously when prefetching)."""
        step = self._step
        self._step += 1
        t0 = time.perf_counter()
        if self._comm is None:
            fetched = self._pull(batch, step)
        else:
            fetched = self._fetch_current(batch, step)
            if next_batch is not None:
                self._next = self._comm.submit(self._pull, next_batch, step + 1)
                self._next_batch = next_batch
        t_pulled = time.perf_counter()
        self._apply(fetched)
        t1 = time.perf_counter()
        inputs, labels = self.feed(batch)
        self.model.train()
        self.dense.zero_grad()
        logits = self.model(*inputs).reshape(-1)
        loss = self.loss_fn(logits, labels)
        t_forward = time.perf_counter()
        loss.backward()
        t_backward = time.perf_counter()
        dense_grads = self.dense.grads()
        sparse_grads: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for table, layers in self.layers.items():
            parts = [g for g in (layer.take_grads() for layer in layers) if g is not None]
            if parts:
                sparse_grads[table] = (np.concatenate([p[0] for p in parts]),
                                       np.concatenate([p[1] for p in parts]))
        t2 = time.perf_counter()
        self.wait_pushed()
        if self._comm is None:
            self.client.push(ref, dense_grads, sparse_grads)
        else:
            self._push = self._comm.submit(self.client.push, ref, dense_grads, sparse_grads)
        t3 = time.perf_counter()
        self.timers["pull_wait"] += t_pulled - t0
        self.timers["load_params"] += t1 - t_pulled
        self.timers["forward"] += t_forward - t1
        self.timers["backward"] += t_backward - t_forward
        self.timers["collect_grads"] += t2 - t_backward
        self.timers["push_wait"] += t3 - t2
        with torch.no_grad():
            probs = torch.sigmoid(logits).numpy().copy()
        return StepResult(float(loss.detach()), probs, labels.numpy().copy())

    def wait_pushed(self) -> None:
        """Block until the last push is applied; re-raise its error if it failed."""
        push, self._push = self._push, None
        if push is not None:
            push.result()

    def drop_prefetch(self) -> None:
        """Forget a prefetch for a batch that will not run (end of a task)."""
        nxt, self._next = self._next, None
        self._next_batch = None
        if nxt is not None:
            nxt.exception()  # wait so the comm thread is idle; a failed prefetch is harmless

    def close(self) -> None:
        try:
            self.drop_prefetch()
            self.wait_pushed()
        finally:
            if self._comm is not None:
                self._comm.shutdown(wait=True)
            for layers in self.layers.values():
                for layer in layers:
                    layer.bind(None)
