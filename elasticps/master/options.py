"""What one master process is told: job, credentials, ports, queue policy, dataset, pservers."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field

from elasticps.config import DEFAULT_MAX_CONCURRENT_RPCS
from elasticps.data.batch_plan import BatchPlan
from elasticps.errors import ConfigError
from elasticps.master.task_queue import QueuePolicy
from elasticps.rpc.credentials import JobCredentials


@dataclass(frozen=True)
class MasterOptions:
    job: str
    credentials: JobCredentials  # the job token and (unless insecure) the master's TLS identity
    host: str = "127.0.0.1"
    port: int = 0  # gRPC port; 0 = any free port, published through the store
    http_port: int = 0
    http_host: str = "127.0.0.1"  # loopback: open page; elsewhere: token + TLS (status_access)
    health_port: int | None = None  # a plaintext grpc.health port for kubelet probes
    data_schemes: tuple[str, ...] = ("file",)  # URL schemes SetDataset may name
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
    max_concurrent_rpcs: int = DEFAULT_MAX_CONCURRENT_RPCS  # more are refused; clients retry
    metrics_port: int = 0  # Prometheus /metrics of this process (0 = any free port)
    status_interval: float = 1.0  # seconds between the status page's samples
    stream_poll_s: float = 2.0  # a stream's listing: at most this long between two polls
    logs_dir: str | None = None  # a local job's role logs, shown on the page (status_logs.py)
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
