"""Hybrid mode's :class:`~elasticps.trainer.api.ParameterClient`: dense tables in the trainer's
replica, averaged by the dense group; sparse tables on the pservers, as in async mode.

It stands where the pservers' client stands for the other modes, so the step runner, the task
loop, evaluation and export need nothing of their own for hybrid mode: a dense pull reads the
replica (once the group has formed), a push hands the dense gradient to the group and, once a
round has applied it, sends the sparse rows to the pservers on a thread of its own, where they
overlap the next batch's compute (sent after the round, their encoding does not hold the GIL
the round's member thread needs); at most one is in flight, and the next pull, the next push
and :meth:`flush` (the task loop's, before a task is reported done) wait for it and raise its
error. The step runner pushes and prefetches on its one communication thread, in the order the
batches run, so the rows prefetched for batch k+1 while batch k computes lack exactly batch k's
update (one batch of sparse staleness, as in async mode, the same in every run); it reads the
dense values when the step starts, after the last round landed
(``StepRunner(dense_after_push=True)``). One finite-gradient rule
(``elasticps.gradients.finite``) decides for both halves: a batch with NaN or Inf anywhere is
dropped by the pservers and skipped by the group, and recorded by both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from elasticps.config import Config
from elasticps.gradients import finite
from elasticps.proto import common_pb2, pserver_pb2
from elasticps.store.api import Store
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.hybrid.checkpoints import DenseCheckpoints
from elasticps.trainer.hybrid.early_update import EarlyUpdate
from elasticps.trainer.hybrid.group import DenseGroup
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.hybrid.rounds import Header, Kind


class HybridParams:
    """Dense through ``group``, sparse through ``client`` (see the module docstring).
    ``make_group(replica)`` builds the group once the dense tables are declared."""

    def __init__(self, client: Any, make_group: Any) -> None:
        self.client = client
        self._make_group = make_group
        self.replica: DenseReplica | None = None
        self.group: DenseGroup | None = None
        self.num_shards = int(getattr(client, "num_shards", 1))
        self._pusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparse-push")
        self._in_flight: Future[Any] | None = None  # the last batch's sparse push
        self.early: EarlyUpdate | None = None  # the dense update computed during backward

    def declare_tables(self, specs: list[pserver_pb2.TableSpec]) -> None:
        dense = [s for s in specs if s.kind == pserver_pb2.TableSpec.DENSE]
        self.client.declare_tables([s for s in specs if s.kind != pserver_pb2.TableSpec.DENSE])
        self.replica = DenseReplica(dense)

    def initialize(self, dense_values: dict[str, np.ndarray], init_fn: Any = None,
                   rows: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """The pservers' sparse tables as in every mode (``rows``: a warm start's); this
        trainer's start values for the group (used only if the job has no dense state yet:
        no live replica, no dense checkpoint); then join the group."""
        assert self.replica is not None, "declare_tables first"
        self.client.initialize({}, None, rows=rows)
        self.replica.set_initial(init_fn() if init_fn is not None else dense_values)
        self.group = self._make_group(self.replica)
        self.group.start()

    def early_update(self, dense: DenseSync) -> EarlyUpdate | None:
        """The hooks that compute a lone member's dense update during the backward pass
        (early_update.py), made once; None on a GPU (each gradient read as it lands would
        stall the device)."""
        if self.early is None and not dense.placement.copies:
            group, replica = self._group(), self.replica
            assert replica is not None
            self.early = EarlyUpdate(replica, group.lock, dense.params, group.solo,
                                     dense.host_grad)
        return self.early

    def _group(self) -> DenseGroup:
        assert self.group is not None, "initialize first"
        return self.group

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        group = self._group()
        group.wait_ready()
        values = group.values()
        return values if names is None else {name: values[name] for name in names}

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        """The rows as the pservers hold them once the last sparse push landed (a prefetch
        for batch k+1 runs while batch k computes: its rows then miss batch k's update only,
        as in async mode)."""
        self.flush()
        rows: np.ndarray = self.client.pull_sparse(table, ids)
        return rows

    def pull_held(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the pservers hold (an export's view): the last sparse push lands first."""
        self.flush()
        held: tuple[np.ndarray, np.ndarray] = self.client.pull_held(table, ids)
        return held

    def specs(self) -> dict[str, pserver_pb2.TableSpec]:
        specs: dict[str, pserver_pb2.TableSpec] = self.client.specs()
        return specs

    def push(self, batch: common_pb2.BatchRef, dense_grads: Mapping[str, np.ndarray],
             sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]],
             counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> bool:
        """The dense gradient through the group, then the sparse rows to the pservers (sent in
        the background); True if the group applied the dense part (False: a duplicate of a
        batch applied before)."""
        ok = finite(dense_grads, sparse_grads)
        self.flush()  # the previous batch's sparse push: one in flight at most, in order
        assert self.replica is not None
        header = Header(Kind.BATCH if ok else Kind.SKIPPED, batch.pass_id, batch.task_id,
                        batch.seq, batch.step)
        early = self.early.take() if self.early is not None else None
        applied = self._group().submit(header,
                                       self.replica.flatten(dense_grads) if ok else None,
                                       early if ok else None)
        # The sparse half goes once the round has run, so that encoding it does not hold the
        # GIL the round's member thread needs; it overlaps the next batch's compute instead.
        # A non-finite batch goes with its dense half, so the client drops it whole (and the
        # pservers record it) by the same rule as every mode.
        self._in_flight = self._pusher.submit(
            self.client.push, batch, {} if ok else dense_grads, sparse_grads, counts)
        return applied

    def flush(self) -> None:
        """Wait until the last sparse push is applied (raising its error, if it failed)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def join_round(self, trainer: str) -> None:
        self._group().set_busy(True)

    def leave_round(self, trainer: str) -> None:
        self._group().set_busy(False)

    def close(self) -> None:
        """Land the last sparse push and leave the dense group (the pservers' client is the
        trainer's to close)."""
        try:
            self.flush()
        finally:
            self._pusher.shutdown(wait=True)
            if self.early is not None:
                self.early.close()
            if self.group is not None:
                self.group.leave()


def hybrid_params(client: Any, store: Store, config: Config, name: str,
                  device: Callable[[], torch.device]) -> HybridParams:
    """The job's hybrid client for trainer ``name``: its dense group meets through ``store``,
    computes on ``device()`` (asked when the group starts: after the model is placed), and
    checkpoints the dense state under PADDLE_CHECKPOINT_URL when the job has one."""

    def make_group(replica: DenseReplica) -> DenseGroup:
        checkpoints = (DenseCheckpoints(config.checkpoint_url, store, name,
                                        keep=config.checkpoint_keep)
                       if config.checkpoint_url else None)
        return DenseGroup(store, replica, name=name, host=config.host,
                          lease_ttl=config.lease_ttl, timeout=config.dense_timeout,
                          device=device(), checkpoints=checkpoints,
                          checkpoint_interval=config.checkpoint_interval)

    return HybridParams(client, make_group)
