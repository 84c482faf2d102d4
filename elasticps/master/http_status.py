"""The master's HTTP status: ``/api/status`` (JSON), ``/metrics`` (Prometheus text) and the
status page at ``/`` (static files of :mod:`elasticps.telemetry.page` that draw themselves from
``/api/status``).

Served by the standard library's threading HTTP server in a daemon thread; it only reads.
``elasticps ui`` serves a finished job's page with the same server.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from elasticps.store.keys import json_safe
from elasticps.telemetry.exporter import CONTENT_TYPE as METRICS_CONTENT_TYPE
from elasticps.telemetry.page import asset

log = logging.getLogger(__name__)

StatusFn = Callable[[], dict[str, Any]]
MetricsFn = Callable[[], bytes]


class StatusServer:
    """Serves ``status_fn()`` and the page over HTTP on ``host:port`` (0 = any free port);
    ``metrics_fn`` (if given) at ``/metrics``."""

    def __init__(self, status_fn: StatusFn, host: str, port: int, *,
                 metrics: MetricsFn | None = None) -> None:
        fn, metrics_fn = status_fn, metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/api/status":
                    body = json.dumps(json_safe(fn()), indent=1, allow_nan=False).encode()
                    kind = "application/json"
                elif path == "/metrics" and metrics_fn is not None:
                    body, kind = metrics_fn(), METRICS_CONTENT_TYPE
                else:
                    found = asset(path)
                    if found is None:
                        self.send_error(404, f"no page {path}; try /, /api/status or /metrics")
                        return
                    body, kind = found
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("status http: " + format, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="status-http",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
