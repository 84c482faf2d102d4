"""The master's reconciliation loop: the I/O around :mod:`elasticps.master.reconcile_policy`.

While the queue waits at a pass end (``TaskQueue.reconciling``) the loop asks every pserver
shard to write a checkpoint now and report which batches of the pass that checkpoint holds
(the ``Checkpoint`` RPC; a shard that is down is waited for, one that restarted answers from
its restored state). The pure :func:`~elasticps.master.reconcile_policy.reconcile` turns the answers
into recovery dispatches, or ends the pass when every shard's checkpoint holds every batch.
Because the answer comes from a durable checkpoint, a pass ends only when a restart of any
shard, from its newest checkpoint, keeps every batch of the pass.

After pass ``P`` ended this way, the shards are told ``PruneApplied(upto_pass=P)``: batches of
passes before ``P`` are forgotten and refused from then on (docs/fault-tolerance.md).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from elasticps.errors import ElasticPSError
from elasticps.master.reconcile_policy import reconcile, report_from_tasks
from elasticps.master.service import MasterState
from elasticps.proto import pserver_pb2

log = logging.getLogger(__name__)


class Shards(Protocol):
    """What the reconciler needs of the pservers (``PServerClient`` provides it)."""

    def checkpoint(self, pass_id: int) -> list[pserver_pb2.CheckpointResponse]: ...

    def prune_applied(self, upto_pass: int) -> int: ...


class Reconciler:
    """Runs reconciliation rounds for ``state`` until ``stop`` is set."""

    def __init__(self, state: MasterState, shards: Shards, stop: threading.Event, *,
                 prune: bool = True, poll_s: float = 0.1, retry_s: float = 1.0) -> None:
        self.state = state
        self.shards = shards
        self.stop = stop
        self.prune = prune
        self.poll_s = poll_s
        self.retry_s = retry_s
        self.rounds = 0

    def step(self) -> bool:
        """One round if a pass waits for it; True if the queue moved."""
        job = self.state.reconcile_job()
        if job is None:
            return False
        pass_id, expected = job
        answers = self.shards.checkpoint(pass_id)
        reports = [report_from_tasks(i, a.tasks, checkpoint_id=a.checkpoint_id,
                                     floor=a.applied_floor, incarnation=a.incarnation)
                   for i, a in enumerate(answers)]
        result = reconcile(pass_id, expected, reports)
        self.rounds += 1
        moved = self.state.apply_reconciliation(result)
        if moved and result.complete and self.prune and pass_id > 0:
            removed = self.shards.prune_applied(pass_id)
            log.info("Master %s of job %s told the pservers to forget batches of passes before "
                     "%d (%d task entries removed).", self.state.node, self.state.job, pass_id,
                     removed)
        return moved

    def run(self) -> None:
        wanted = self.state.reconcile_wanted
        while not self.stop.is_set():
            try:
                wanted.clear()  # a pass end from here on wakes the wait below
                if not self.step():
                    wanted.wait(self.poll_s)
            except ElasticPSError as exc:
                if self.stop.is_set() or self.state.deposed.is_set():
                    return
                log.warning("Master %s of job %s could not reconcile with the pservers (%s); "
                            "it retries in %.1fs.", self.state.node, self.state.job, exc,
                            self.retry_s)
                self.stop.wait(self.retry_s)
