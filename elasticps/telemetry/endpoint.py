"""A process's metrics URL in the store (``metrics/<role>/<name>``), under its own lease.

The lease is refreshed in the background; if it expires (the store was unreachable for longer
than its TTL) a fresh lease and the key are put again at the next check, so an endpoint comes
back by itself after a store outage. Stopping revokes the lease: the key vanishes with the
process, and the master's ``metrics_urls`` lists only live endpoints.
"""

from __future__ import annotations

import logging
import threading

from elasticps.errors import LeaseExpiredError, StoreError
from elasticps.store.api import Lease, Store
from elasticps.store.keys import MetricsEndpoint

log = logging.getLogger(__name__)


class EndpointPublication:
    """Keeps ``endpoint`` published in ``store`` until :meth:`stop`."""

    def __init__(self, store: Store, endpoint: MetricsEndpoint, ttl: int,
                 check_s: float = 1.0) -> None:
        self.store = store
        self.endpoint = endpoint
        self.ttl = ttl
        self.check_s = check_s
        self._lease: Lease | None = None
        self._lock = threading.Lock()  # the check thread and rename() take turns
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-endpoint", daemon=True)

    def start(self) -> EndpointPublication:
        with self._lock:
            self._publish()
        self._thread.start()
        return self

    def rename(self, name: str) -> None:
        """Publish under another name (a pserver learns its slot after it started)."""
        with self._lock:
            old, self._lease = self._lease, None
            self.endpoint = MetricsEndpoint(self.endpoint.role, name, self.endpoint.url)
            self._revoke(old)
            self._publish()

    def _publish(self) -> None:
        try:
            lease = self.store.grant_lease(self.ttl)
            self.store.put(self.endpoint.key, self.endpoint.encode(), lease.id)
            lease.keep_alive()
            self._lease = lease
        except (StoreError, LeaseExpiredError) as exc:
            log.warning("Could not publish the metrics endpoint %s (%s); retrying.",
                        self.endpoint.url, exc)

    def _run(self) -> None:
        while not self._halt.wait(self.check_s):
            with self._lock:
                lease = self._lease
                if lease is None or lease.expired:
                    self._publish()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            lease, self._lease = self._lease, None
        self._revoke(lease)

    @staticmethod
    def _revoke(lease: Lease | None) -> None:
        if lease is None:
            return
        try:
            lease.revoke()
        except StoreError as exc:
            log.debug("Could not revoke a metrics endpoint's lease: %s", exc)
