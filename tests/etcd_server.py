"""A real etcd for tests: :class:`~elasticps.store.local_etcd.LocalEtcd` (free loopback ports,
health polled, stopped by PID) in a temporary directory it removes when stopped, unless the test
names the directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from elasticps.store.local_etcd import LocalEtcd, free_port

__all__ = ["EtcdServer", "free_port"]


class EtcdServer(LocalEtcd):
    """One etcd member on loopback. ``restart()`` keeps the data dir and the ports; ``tls_dir``
    makes it serve clients over mutual TLS (see :class:`LocalEtcd`)."""

    def __init__(self, data_dir: str | None = None, tls_dir: Path | None = None) -> None:
        self._own_dir = data_dir is None
        super().__init__(Path(data_dir or tempfile.mkdtemp(prefix="elasticps-etcd-")),
                         name="test", tls_dir=tls_dir)

    @property
    def base_dir(self) -> Path:
        return self.directory

    def stop(self) -> None:
        super().stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
