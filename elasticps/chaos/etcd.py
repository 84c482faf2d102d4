"""The etcd member a chaos run's store outage takes down: one
:class:`~elasticps.store.local_etcd.LocalEtcd` with its data in a directory of the run."""

from __future__ import annotations

from pathlib import Path

from elasticps.errors import ConfigError
from elasticps.store.local_etcd import LocalEtcd


def outage_etcd(directory: Path) -> LocalEtcd:
    try:
        return LocalEtcd(directory, name="chaos")
    except ConfigError as exc:
        raise ConfigError(f"a store outage needs etcd: {exc}; or pass --outage 0") from exc
