"""The master's HTTP status: ``/api/status`` (JSON), ``/metrics`` (Prometheus text), a local
job's role logs (``/api/logs``: their names; ``/api/logs/<name>``: the last lines of one) and
the status page at ``/`` (static files of :mod:`elasticps.telemetry.page` that draw themselves
from ``/api/status``).

Served by the standard library's threading HTTP server in a daemon thread; it only reads.
``elasticps ui`` serves a finished job's page with the same server.
Who may read it, and over what, is a :class:`~elasticps.master.status_access.StatusAccess`:
open on loopback, token (and TLS) anywhere else.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from elasticps.config import listen_error
from elasticps.master.status_access import OPEN, StatusAccess
from elasticps.master.status_logs import LogFiles
from elasticps.store.keys import json_safe
from elasticps.telemetry.exporter import CONTENT_TYPE as METRICS_CONTENT_TYPE
from elasticps.telemetry.page import asset

log = logging.getLogger(__name__)

StatusFn = Callable[[], dict[str, Any]]
MetricsFn = Callable[[], bytes]


class StatusServer:
    """Serves ``status_fn()`` and the page over HTTP on ``host:port`` (0 = any free port),
    ``metrics`` (if given) at ``/metrics``, to whoever ``access`` admits (over TLS when it
    has a context). A port it cannot listen on is a ConfigError naming ``port_setting``, the
    flag or variable the port came from."""

    def __init__(self, status_fn: StatusFn, host: str, port: int, *,
                 metrics: MetricsFn | None = None, access: StatusAccess = OPEN,
                 port_setting: str = "the command line",
                 logs: LogFiles | None = None) -> None:
        fn, metrics_fn, log_files = status_fn, metrics, logs or LogFiles(None)

        class Handler(BaseHTTPRequestHandler):
            timeout = 10.0  # seconds a client may take to send its request

            def do_GET(self) -> None:
                if not access.allows(self.headers):
                    self.send_error(401, "the status page requires the job token "
                                    "(header X-Elasticps-Token)")
                    return
                path = self.path.split("?", 1)[0]
                if path == "/api/status":
                    body = json.dumps(json_safe(fn()), indent=1, allow_nan=False).encode()
                    kind = "application/json"
                elif path == "/metrics" and metrics_fn is not None:
                    body, kind = metrics_fn(), METRICS_CONTENT_TYPE
                elif path == "/api/logs":
                    body = json.dumps({"logs": log_files.names()}).encode()
                    kind = "application/json"
                elif path.startswith("/api/logs/"):
                    text = log_files.tail(path.removeprefix("/api/logs/"))
                    if text is None:
                        self.send_error(404, "no such log; /api/logs lists them")
                        return
                    body, kind = text.encode(), "text/plain; charset=utf-8"
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

        try:
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:  # a busy port: ConfigError names where the port came from
            raise listen_error("the status page", host, port, port_setting, exc) from exc
        self.httpd.daemon_threads = True
        if access.ssl_context is not None:
            # The handshake runs in the request's thread (on its first read), so a client that
            # stalls it holds that thread for at most Handler.timeout, never the accept loop.
            self.httpd.socket = access.ssl_context.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="status-http",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
