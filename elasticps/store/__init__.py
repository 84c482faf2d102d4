"""Coordination store: an interface (:mod:`.api`) and two backends, chosen by URL."""

from __future__ import annotations

from elasticps.config import check_job_name
from elasticps.errors import ConfigError
from elasticps.store.api import (
    Compare,
    CompareTarget,
    Delete,
    Event,
    EventType,
    KeyValue,
    Lease,
    Put,
    Store,
    TxnResult,
    Watch,
)


def job_prefix(job_name: str) -> str:
    """Where a job's keys live in a shared store. The name is checked: one holding ``/`` would
    reach into another job's keys (``a/b`` lies under job ``a``'s prefix)."""
    return f"/elasticps/{check_job_name(job_name)}/"


def open_store(url: str, job_name: str) -> Store:
    """Open the store at ``url`` with every key under the job's prefix.

    ``etcd://host:2379[,host2:2379]`` opens etcd; ``file:///path/job.db`` the embedded store.
    """
    if url.startswith("etcd://"):
        from elasticps.store.etcd_store import EtcdStore

        return EtcdStore.from_url(url, prefix=job_prefix(job_name))
    if url.startswith("file://"):
        from elasticps.store.embedded_store import EmbeddedStore

        return EmbeddedStore.from_url(url, prefix=job_prefix(job_name))
    raise ConfigError(f"store URL {url!r} must start with etcd:// or file://")


__all__ = [
    "Compare",
    "CompareTarget",
    "Delete",
    "Event",
    "EventType",
    "KeyValue",
    "Lease",
    "Put",
    "Store",
    "TxnResult",
    "Watch",
    "job_prefix",
    "open_store",
]
