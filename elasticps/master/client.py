"""``MasterClient``: a trainer's handle on the master, wherever it currently runs.

The client reads the leader's address from ``master/address`` (published under the leader's
election lease) and, when a call finds the master unavailable (dead, deposed, or not yet
elected) or the store down, re-reads it and retries by :data:`MASTER_RETRY` for up to
``retry_for`` seconds, so a trainer rides through a master failover. This is the only layer that
retries an absent master: the task loop above it lets the final error through. Every report
it sends is idempotent on the master (a repeated TaskFinished is accepted again), so retrying a
call whose answer was lost is safe.

A trainer registers under its own store lease at ``trainer/<name>``; when the trainer dies the
lease expires, the key vanishes and the master releases its tasks at once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from elasticps.data.batch_plan import BatchPlan
from elasticps.errors import (
    LeaseExpiredError,
    OverloadedError,
    StoreUnavailableError,
    UnavailableError,
)
from elasticps.proto import master_pb2, master_pb2_grpc
from elasticps.retry import RetryPolicy
from elasticps.rpc.call_metrics import ClientCallMetrics
from elasticps.rpc.channel import call, make_channel
from elasticps.rpc.credentials import JobCredentials
from elasticps.store.api import Lease, Store
from elasticps.store.keys import (
    MASTER_ADDRESS,
    TrainerRegistration,
    read_master_address,
    trainer_key,
)

log = logging.getLogger(__name__)

Response = TypeVar("Response")

# A master is away while a standby takes over (the election lease TTL plus a few seconds) and
# while the store is down, and full while more trainers call at once than it takes calls
# (OverloadedError); all are worth waiting out. Any other error is the master's answer.
MASTER_RETRY = RetryPolicy(deadline=300.0, initial_backoff=0.05, max_backoff=1.0,
                           retryable=(UnavailableError, StoreUnavailableError, OverloadedError))


class MasterClient:
    """Calls the job's master on behalf of trainer ``trainer_name``; thread-safe."""

    def __init__(self, store: Store, credentials: JobCredentials, trainer_name: str, *,
                 retry_for: float = 300.0, rpc_timeout: float = 10.0,
                 lease_ttl: int = 5, call_metrics: ClientCallMetrics | None = None) -> None:
        self.store = store
        self.call_metrics = call_metrics  # every call counted by method and code
        self.credentials = credentials
        self.trainer = trainer_name
        self.retry = MASTER_RETRY.within(retry_for)
        self.rpc_timeout = rpc_timeout
        self.lease_ttl = lease_ttl
        self._lock = threading.Lock()
        self._address: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: master_pb2_grpc.MasterStub | None = None
        self._lease: Lease | None = None

    # --------------------------------------------------------------------------- plumbing

    def _current_stub(self) -> master_pb2_grpc.MasterStub:
        with self._lock:
            published = read_master_address(self.store)
            address = None if published is None else published.grpc
            if address is None:
                raise UnavailableError(f"no master has published {MASTER_ADDRESS} yet")
            if address != self._address or self._stub is None:
                if self._channel is not None:
                    self._channel.close()
                self._channel = make_channel(address, self.credentials, "master",
                                             call_metrics=self.call_metrics)
                self._stub = master_pb2_grpc.MasterStub(self._channel)
                if self._address is not None:
                    log.info("Trainer %s follows the master to %s.", self.trainer, address)
                self._address = address
            return self._stub

    def _call(self, pick: Callable[[master_pb2_grpc.MasterStub], Callable[..., Response]],
              request: Any, what: str, before: Callable[[], None] | None = None) -> Response:
        """Call the leader, re-resolving its address on every attempt; this is the one layer
        that retries an absent master. ``before`` runs first on every attempt (its store
        errors are retried too)."""

        def attempt() -> Response:
            if before is not None:
                before()
            return call(pick(self._current_stub()), request, timeout=self.rpc_timeout,
                        what=f"master {what}")

        try:
            return self.retry.call(attempt, what=f"Trainer {self.trainer}: master {what}")
        except (UnavailableError, StoreUnavailableError, OverloadedError) as exc:
            raise UnavailableError(
                f"trainer {self.trainer} found no master for {self.retry.deadline:g}s "
                f"({what}): {exc}") from exc

    # -------------------------------------------------------------------------------- calls

    def set_dataset(self, url: str, chunks_per_task: int, num_passes: int,
                    plan: BatchPlan, stream_from: str | None = None
                    ) -> master_pb2.SetDatasetResponse:
        """Set (or join) the job's dataset with this trainer's batch plan; a plan that differs
        from the job's is refused (FailedPreconditionError naming the difference).
        ``stream_from`` (a string, "" for the first partition on): ``url`` is a stream's
        prefix, trained once, from that partition on."""
        request = master_pb2.SetDatasetRequest(
            dataset_url=url, chunks_per_task=chunks_per_task, num_passes=num_passes,
            batch_size=plan.batch_size, features=plan.features,
            stream=stream_from is not None, stream_from=stream_from or "")
        if plan.shuffle_seed is not None:
            request.shuffle_seed = plan.shuffle_seed
        return self._call(lambda s: s.SetDataset, request, "SetDataset")

    def get_task(self, pass_id: int) -> master_pb2.GetTaskResponse:
        return self._call(lambda s: s.GetTask, master_pb2.GetTaskRequest(
            trainer=self.trainer, pass_id=pass_id), "GetTask", before=self._rejoin_if_lost)

    def report_progress(self, task: master_pb2.Task, records_done: int) -> bool:
        response = self._call(lambda s: s.ReportProgress, master_pb2.ReportProgressRequest(
            trainer=self.trainer, task_id=task.task_id, epoch=task.epoch,
            records_done=records_done), "ReportProgress")
        if not response.still_owner:
            log.info("Trainer %s no longer holds task %d: %s", self.trainer, task.task_id,
                     response.reason)
        return bool(response.still_owner)

    def task_finished(self, task: master_pb2.Task, records: int, batches: int) -> bool:
        response = self._call(lambda s: s.TaskFinished, master_pb2.TaskFinishedRequest(
            trainer=self.trainer, task_id=task.task_id, epoch=task.epoch, records=records,
            batches=batches), "TaskFinished")
        if not response.accepted:
            log.info("Trainer %s: the master refused the finish of task %d: %s", self.trainer,
                     task.task_id, response.reason)
        return bool(response.accepted)

    def finish_and_get(self, task: master_pb2.Task, records: int, batches: int,
                       pass_id: int) -> tuple[bool, master_pb2.GetTaskResponse]:
        """:meth:`task_finished`, then :meth:`get_task` of ``pass_id``, in one call: whether the
        finish was accepted, and the next GetTask answer. A retry after a lost answer is safe
        (the master finishes nothing twice and hands back the task it had assigned)."""
        request = master_pb2.FinishAndGetTaskRequest(
            finished=master_pb2.TaskFinishedRequest(
                trainer=self.trainer, task_id=task.task_id, epoch=task.epoch, records=records,
                batches=batches),
            pass_id=pass_id)
        response = self._call(lambda s: s.FinishAndGetTask, request, "FinishAndGetTask",
                              before=self._rejoin_if_lost)
        if not response.finished.accepted:
            log.info("Trainer %s: the master refused the finish of task %d: %s", self.trainer,
                     task.task_id, response.finished.reason)
        return bool(response.finished.accepted), response.next

    def task_failed(self, task: master_pb2.Task, reason: str) -> bool:
        response = self._call(lambda s: s.TaskFailed, master_pb2.TaskFailedRequest(
            trainer=self.trainer, task_id=task.task_id, epoch=task.epoch, reason=reason),
            "TaskFailed")
        return bool(response.accepted)

    def request_save_model(self, block_seconds: float) -> bool:
        response = self._call(lambda s: s.RequestSaveModel, master_pb2.RequestSaveModelRequest(
            trainer=self.trainer, block_seconds=block_seconds), "RequestSaveModel")
        return bool(response.granted)

    def status(self) -> dict[str, Any]:
        response = self._call(lambda s: s.Status, master_pb2.StatusRequest(), "Status")
        doc = json.loads(response.json)
        return doc if isinstance(doc, dict) else {}

    # ------------------------------------------------------------------------- registration

    def register_trainer(self) -> None:
        """Put ``trainer/<name>`` under a fresh lease kept alive in the background."""
        if self._lease is not None and not self._lease.expired:
            return
        lease = self.store.grant_lease(self.lease_ttl)
        self.store.put(trainer_key(self.trainer), TrainerRegistration().encode(), lease.id)
        lease.keep_alive()
        self._lease = lease
        log.info("Trainer %s registered with the master under a %ds lease.", self.trainer,
                 self.lease_ttl)

    def _rejoin_if_lost(self) -> None:
        """Register again before asking for work if our lease expired (e.g. we were cut off
        from the store for longer than its TTL): the master counted us lost and handed our
        tasks out again. Without a live key, tasks given to us now would outlive our death
        by the task lease instead of the store lease."""
        lease = self._lease
        if lease is None or not lease.expired:
            return
        log.warning("Trainer %s lost its store lease, so the master counted it lost and gave "
                    "its tasks to others; it registers again before asking for work.",
                    self.trainer)
        self.register_trainer()

    def unregister(self, *, graceful: bool = True) -> None:
        """Leave: mark the key as leaving (tasks go back without a failure), then revoke."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        try:
            if graceful:
                self.store.put(trainer_key(self.trainer),
                               TrainerRegistration(leaving=True).encode(), lease.id)
            lease.revoke()
        except (LeaseExpiredError, StoreUnavailableError) as exc:
            log.warning("Trainer %s could not unregister cleanly: %s", self.trainer, exc)

    def close(self) -> None:
        self.unregister()
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None
            self._address = None
