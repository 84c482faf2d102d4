"""The scoring server's HTTP endpoints, on the standard library's threading HTTP server.

==================== =========================================================================
``POST /score``      ``{"rows": [{column: value, ...}, ...]}`` -> ``{"version": v, "scores":
                     [...]}`` (a class label adds ``"classes"``); 400 naming the bad field, row
                     or column; 413 over the size limits; 503 before a version is loaded
``GET /healthz``     200 ``{"status": "ok", "version": v}`` once a version is loaded (a
                     stream's model adds ``"partition"``: the newest partition it trained
                     through), else 503
``GET /version``     the loaded version: number, kind, base, training position (a stream's
                     model: ``stream``, the partitions it trained through), and its
                     timestamps (``committed_at``, ``published_at``, ``loaded_at``,
                     ``first_answer_at``; Unix seconds) with ``freshness_s`` (commit to first
                     answer) and ``age_s`` (commit to now)
``GET /metrics``     Prometheus text (:mod:`elasticps.serve.metrics`)
==================== =========================================================================

HTTP/1.1 with keep-alive; a request body must say its length (411 otherwise) and stay within
``max_body`` bytes (413, and the connection closes unread), a request at most ``max_rows``
rows. Bodies are JSON only: nothing is unpickled or evaluated. Every request is answered with
JSON, an error as ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from elasticps.config import listen_error
from elasticps.errors import InvalidArgumentError, shown
from elasticps.serve.follower import ModelFollower
from elasticps.serve.metrics import ServeMetrics
from elasticps.serve.scoring import LoadedVersion, ScoringError
from elasticps.telemetry.exporter import CONTENT_TYPE as METRICS_CONTENT_TYPE

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_ROWS = 1024
REQUEST_TIMEOUT_S = 10.0  # a client has this long to send its request
SHUTDOWN_POLL_S = 0.05


class HTTPError(Exception):
    """An answer other than 200, with the message the client reads."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def score_request(body: bytes, loaded: LoadedVersion | None, max_rows: int) -> dict[str, Any]:
    """The answer to ``POST /score`` with ``body``, scored by ``loaded``."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HTTPError(400, f"the body is not JSON: {exc}") from exc
    if not isinstance(request, dict) or not isinstance(request.get("rows"), list):
        raise HTTPError(400, 'the body must be a JSON object {"rows": [{column: value, ...}, '
                             '...]}; field "rows" is missing or not a list')
    extra = sorted(set(request) - {"rows"})
    if extra:
        raise HTTPError(400, f"unknown field {shown(extra[0])}: the body holds only \"rows\"")
    rows = request["rows"]
    if len(rows) > max_rows:
        raise HTTPError(413, f"rows: {len(rows)} rows, at most {max_rows} per request")
    if loaded is None:
        raise HTTPError(503, "no model version is loaded yet")
    try:
        scores = loaded.score(rows)
    except InvalidArgumentError as exc:
        raise HTTPError(400, f"rows: {exc}") from exc
    except ScoringError as exc:
        raise HTTPError(500, str(exc)) from exc
    answer: dict[str, Any] = {"version": loaded.version, "scores": scores}
    if loaded.classes is not None:
        answer["classes"] = loaded.classes
    return answer


def newest_partition(loaded: LoadedVersion) -> str | None:
    """The newest stream partition ``loaded`` trained through; None for a dataset's model."""
    stream = loaded.record.position.get("stream")
    newest = stream.get("newest") if isinstance(stream, dict) else None
    return newest if isinstance(newest, str) else None


def version_document(loaded: LoadedVersion, now: float) -> dict[str, Any]:
    """``GET /version``: the loaded version and its timestamps."""
    record = loaded.record
    first = loaded.first_answer_at
    return {"version": record.version, "kind": record.kind, "base": record.base,
            "depth": record.depth, "position": record.position,
            "committed_at": record.committed_at, "published_at": record.published_at,
            "loaded_at": loaded.loaded_at, "first_answer_at": first,
            "freshness_s": None if first is None else first - record.committed_at,
            "age_s": now - record.committed_at, "load_s": loaded.load_s}


class ScoringServer:
    """``follower``'s versions over HTTP on ``host:port`` (0: any free port)."""

    def __init__(self, follower: ModelFollower, metrics: ServeMetrics, host: str, port: int, *,
                 max_body: int = MAX_BODY_BYTES, max_rows: int = MAX_ROWS,
                 port_setting: str = "--port", wall: Callable[[], float] = time.time) -> None:
        self.follower = follower
        handler = _handler(follower, metrics, max_body, max_rows, wall)
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise listen_error("elasticps serve", host, port, port_setting, exc) from exc
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        # close() waits up to one poll interval for the loop to notice.
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="serve-http", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(follower: ModelFollower, metrics: ServeMetrics, max_body: int, max_rows: int,
             wall: Callable[[], float]) -> type[BaseHTTPRequestHandler]:

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = REQUEST_TIMEOUT_S
        # Headers and body go out in two writes: without TCP_NODELAY the body waits for the
        # client's delayed ACK (40 ms a request on a keep-alive connection).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            loaded = follower.current
            if path == "/healthz":
                if loaded is None:
                    self._json(503, {"status": "loading", "error": "no version loaded yet"})
                else:
                    doc: dict[str, Any] = {"status": "ok", "version": loaded.version}
                    stream = newest_partition(loaded)
                    if stream is not None:
                        doc["partition"] = stream
                    self._json(200, doc)
            elif path == "/version":
                if loaded is None:
                    self._json(503, {"error": "no version loaded yet"})
                else:
                    self._json(200, version_document(loaded, wall()))
            elif path == "/metrics":
                self._send(200, metrics.text(), METRICS_CONTENT_TYPE)
            elif path == "/score":
                self._json(405, {"error": "POST /score with {\"rows\": [...]}"})
            else:
                self._json(404, {"error": f"no page {shown(path)}; try POST /score, GET "
                                          "/healthz, /version or /metrics"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path != "/score":
                self.close_connection = True  # the body is not read
                self._json(404, {"error": f"no endpoint {shown(path)}; POST /score"})
                return
            started = time.perf_counter()
            try:
                body = self._body()
                loaded = follower.current  # one version for the whole request
                answer = score_request(body, loaded, max_rows)
            except HTTPError as exc:
                self._json(exc.code, {"error": str(exc)})
                return
            # Counted before the answer goes: a client that reads /metrics next sees it.
            metrics.rows.inc(len(answer["scores"]))
            if loaded is not None:
                follower.answered(loaded)
            self._json(200, answer)
            metrics.latency.observe(time.perf_counter() - started)

        def _body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if self.headers.get("Transfer-Encoding") or length is None:
                self.close_connection = True
                raise HTTPError(411, "the request must say its body's length (Content-Length)")
            try:
                size = int(length)
            except ValueError:
                size = -1
            if size < 0:
                self.close_connection = True
                raise HTTPError(400, f"Content-Length {shown(length)} is not a length")
            if size > max_body:
                self.close_connection = True  # left unread
                raise HTTPError(413, f"the body is {size} bytes, at most {max_body}")
            body = self.rfile.read(size)
            if len(body) != size:
                self.close_connection = True
                raise HTTPError(400, f"the body ended after {len(body)} of {size} bytes")
            return body

        def _json(self, code: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc, allow_nan=False).encode()
            self._send(code, body, "application/json")

        def _send(self, code: int, body: bytes, kind: str) -> None:
            path = self.path.split("?", 1)[0]
            known = path if path in ("/score", "/healthz", "/version", "/metrics") else "other"
            metrics.requests.labels(known, str(code)).inc()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("serve http: " + format, *args)

    return Handler
