"""What one master process is told: job, token, ports, queue policy, dataset, pservers."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field

from elasticps.data.batching import BatchPlan
from elasticps.errors import ConfigError
from elasticps.master.task_queue import QueuePolicy


@dataclass(frozen=True)
class MasterOptions:
    job: str
    token: str
    host: str = "127.0.0.1"
    port: int = 0  # gRPC port; 0 = any free port, published through the store
    http_port: int = 0
    lease_ttl: int = 5  # election lease: bounds the takeover time
    policy: QueuePolicy = field(default_factory=QueuePolicy)
    dataset: str | None = None  # set this dataset at start (else the first SetDataset does)
    chunks_per_task: int = 1
    num_passes: int = 1
    batch_plan: BatchPlan | None = None  # the dataset's batch plan; needed with ``dataset``
    # Pservers to reconcile with at every pass end (0 = none: passes end without it). Set
    # policy.reconcile to match (with_reconcile does).
    num_pservers: int = 0
    reconcile_timeout: float = 30.0  # how long one round waits for a shard that is down
    node: str = field(default_factory=lambda: f"master-{socket.gethostname()}-{os.getpid()}")

    def __post_init__(self) -> None:
        if self.dataset and self.batch_plan is None:
            raise ConfigError(
                f"a master given the dataset {self.dataset!r} needs its batch plan (batch size, "
                "shuffle seed, features): the master counts each task's batches with it")


def with_reconcile(options: MasterOptions) -> MasterOptions:
    """``options`` whose queue policy reconciles exactly when there are pservers."""
    want = options.num_pservers > 0
    if options.policy.reconcile == want:
        return options
    return dataclasses.replace(options,
                               policy=dataclasses.replace(options.policy, reconcile=want))
