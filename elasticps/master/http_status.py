"""The master's HTTP status: ``/api/status`` (JSON) and a small human page at ``/``.

Served by the standard library's threading HTTP server in a daemon thread; it only reads.
Who may read it, and over what, is a :class:`~elasticps.master.status_access.StatusAccess`:
open on loopback, token (and TLS) anywhere else.
"""

from __future__ import annotations

import html
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from elasticps.master.status_access import OPEN, StatusAccess

log = logging.getLogger(__name__)

StatusFn = Callable[[], dict[str, Any]]


def render_page(doc: dict[str, Any]) -> str:
    """A plain HTML page of the status document (refreshes itself every 2 seconds)."""
    esc = html.escape
    rows = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(str(v))}</td></tr>"
                   for k, v in doc.items() if k not in ("failed_tasks", "failure_log"))
    failed = "".join(
        f"<tr><td>{e['pass']}</td><td>{e['task']}</td><td>{esc(e['reason'])}</td></tr>"
        for e in doc.get("failure_log", []))
    failed_table = (f"<h2>Failed tasks</h2><table><tr><th>pass</th><th>task</th>"
                    f"<th>reason</th></tr>{failed}</table>") if failed else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<meta http-equiv='refresh' content='2'>"
        f"<title>elasticps job {esc(str(doc.get('job')))}</title>"
        "<style>body{font-family:sans-serif}th{text-align:left;padding-right:1em}</style>"
        f"</head><body><h1>elasticps job {esc(str(doc.get('job')))}: "
        f"{esc(str(doc.get('state')))}</h1><table>{rows}</table>{failed_table}"
        "<p>JSON: <a href='/api/status'>/api/status</a></p></body></html>")


class StatusServer:
    """Serves ``status_fn()`` over HTTP on ``host:port`` (0 = any free port), to whoever
    ``access`` admits (over TLS when it has a context)."""

    def __init__(self, status_fn: StatusFn, host: str, port: int,
                 access: StatusAccess = OPEN) -> None:
        fn = status_fn

        class Handler(BaseHTTPRequestHandler):
            timeout = 10.0  # seconds a client may take to send its request

            def do_GET(self) -> None:
                if not access.allows(self.headers):
                    self.send_error(401, "the status page requires the job token "
                                    "(header X-Elasticps-Token)")
                    return
                path = self.path.split("?", 1)[0]
                if path == "/api/status":
                    body = json.dumps(fn(), indent=1).encode()
                    kind = "application/json"
                elif path in ("/", "/index.html"):
                    body = render_page(fn()).encode()
                    kind = "text/html; charset=utf-8"
                else:
                    self.send_error(404, f"no page {path}; try / or /api/status")
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("status http: " + format, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
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
