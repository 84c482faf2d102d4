"""``elasticps data receive``: the other end of a dataset upload into a PersistentVolumeClaim.

A transfer Job (:mod:`elasticps.cluster.claim_upload`) runs this in a pod that mounts the
claim; the uploading CLI reaches it through the API server's pod proxy. Plain HTTP inside the
pod (the hop from the user to the API server is the API server's TLS); every request but the
readiness probe must carry the per-transfer token (``X-Elasticps-Token``), read from a file
mounted from a Secret and compared in constant time, before any body is read.

The routes (``<rel>`` is a path inside the dataset directory, percent-encoded)::

    GET  /healthz                         readiness probe: "ok", nothing else
    GET  /files/<rel>?sha256=H&size=N[&overwrite=1]
                                          {"in_place": true|false}; 409 when another file is
                                          there (unless overwrite), as the fsspec route refuses
    PUT  /files/<rel>   X-Elasticps-Sha256: H, Content-Length: N (at most --max-bytes)
                                          written to <rel>.elasticps-partial, read back, checked
                                          against H, then renamed (data.upload.copy_verified)
    POST /finish                          the upload is over: the receiver exits 0

A path that is absolute, holds ``.``/``..``/empty parts or a backslash, names a partial copy,
or leads out of the directory through a symlink is refused (400), as is a body without a
length (411), a Content-Length that is not a whole number (400) or one past the limit (413).
The receiver also exits (1) after ``--idle-timeout`` seconds without authenticated progress (a
request with the token, or bytes of its body), so a transfer whose client died does not hold
the claim forever, and requests without the token cannot keep it alive.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import fsspec

from elasticps.config import listen_error
from elasticps.data.upload import PARTIAL_SUFFIX, copy_verified, in_place
from elasticps.errors import ConfigError, DataError, shown

logger = logging.getLogger(__name__)

TOKEN_HEADER = "X-Elasticps-Token"
SHA256_HEADER = "X-Elasticps-Sha256"
RECEIVER_PORT = 8080
DEFAULT_MAX_BYTES = 64 * 2**30  # one file (one request); a Parquet file is far smaller
DEFAULT_IDLE_TIMEOUT = 3600.0
MAX_PATH = 4096
BLOCK = 2**20
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
_LENGTH = re.compile(r"^[0-9]{1,20}\Z")  # int() alone takes " 12", "+12" and "1_2"


class RefusedRequestError(Exception):
    """A request the receiver answers with ``status`` and a sentence saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def safe_relative(root: Path, rel: str) -> Path:
    """``root/rel``, or :class:`RefusedRequestError` (400) when ``rel`` could leave ``root``."""
    parts = rel.split("/")
    if not rel or len(rel) > MAX_PATH or rel.startswith("/") or "\\" in rel or "\0" in rel \
            or any(part in ("", ".", "..") for part in parts):
        raise RefusedRequestError(400, f"path {rel!r} is not a relative path inside the dataset "
                                  "(no '.', '..', empty parts, backslashes or leading '/')")
    if rel.endswith(PARTIAL_SUFFIX):
        raise RefusedRequestError(400, f"path {rel!r} names a partial copy, not a dataset file")
    target = root / rel
    # A symlink already in the claim must not carry a read or a write out of the directory.
    real_root, real_parent = os.path.realpath(root), os.path.realpath(target.parent)
    if target.is_symlink() or (real_parent != real_root
                               and not real_parent.startswith(real_root + os.sep)):
        raise RefusedRequestError(400, f"path {rel!r} leads out of the dataset directory")
    return target


@dataclass
class Receiver:
    """The receiver's state: where files go, the token, the limit, when it was last used."""

    root: Path
    token: str
    max_bytes: int = DEFAULT_MAX_BYTES
    last_request: float = field(default_factory=time.monotonic)
    finished: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if len(self.token) < 16:
            raise ConfigError("the transfer token is shorter than 16 characters; refusing to "
                              "serve with a guessable token")
        self.root.mkdir(parents=True, exist_ok=True)
        self.fs = fsspec.filesystem("file")

    def touch(self) -> None:
        """Authenticated progress: a request that passed the token check, or bytes of its
        body. Nothing else keeps the receiver from its idle timeout."""
        self.last_request = time.monotonic()

    def authorised(self, headers: Any) -> bool:
        given = headers.get(TOKEN_HEADER) or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def check(self, rel: str, query: dict[str, list[str]]) -> dict[str, Any]:
        target = safe_relative(self.root, rel)
        sha = _sha256_value(query.get("sha256", [""])[0])
        try:
            size = int(query.get("size", [""])[0])
        except ValueError:
            raise RefusedRequestError(400, "query parameter size must be a whole number") from None
        overwrite = query.get("overwrite", ["0"])[0] == "1"
        try:
            return {"in_place": in_place(self.fs, str(target), sha, size, rel, overwrite)}
        except DataError as exc:
            raise RefusedRequestError(409, str(exc)) from exc

    def put(self, rel: str, sha: str, length: int, body: Iterator[bytes]) -> None:
        target = safe_relative(self.root, rel)
        try:
            copy_verified(self.fs, body, str(target), sha, rel)
        except DataError as exc:
            raise RefusedRequestError(422, str(exc)) from exc
        logger.info("Received %s (%d bytes, sha256 %s) into %s.", rel, length, sha, self.root)


def _sha256_value(text: str) -> str:
    if not _SHA256.match(text):
        raise RefusedRequestError(400, f"{text[:80]!r} is not a sha256 (64 lowercase hex digits)")
    return text


def _content_length(text: str | None) -> int:
    if text is None:
        raise RefusedRequestError(411, "a file must be sent with a Content-Length")
    if not _LENGTH.match(text):
        raise RefusedRequestError(400, f"the Content-Length header {shown(text)} is not a "
                                  "whole number of bytes")
    return int(text)


def _body(stream: Any, length: int, progress: Callable[[], None]) -> Iterator[bytes]:
    """The request body in blocks as they arrive (``read1``: a slow sender's bytes count as
    progress when they come, not when a whole block is in)."""
    left = length
    while left > 0:
        block = stream.read1(min(BLOCK, left))
        if not block:
            raise OSError(f"the request ended after {length - left} of {length} bytes")
        left -= len(block)
        progress()
        yield block


def make_server(receiver: Receiver, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server for ``receiver`` on ``host:port`` (port 0: the kernel picks)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("receive: " + format, *args)

        def _answer(self, status: int, payload: dict[str, Any] | str) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(payload, str)
                             else "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("Connection", "close")  # a body may be left unread
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            split = urlsplit(self.path)
            if method == "GET" and split.path == "/healthz":
                self._answer(200, "ok")
                return
            try:
                if not receiver.authorised(self.headers):
                    raise RefusedRequestError(401, f"missing or wrong {TOKEN_HEADER}")
                receiver.touch()  # only after the token: others cannot keep it alive
                self._serve(method, split.path, parse_qs(split.query))
            except RefusedRequestError as exc:
                self._answer(exc.status, {"error": str(exc)})
            except OSError as exc:
                self._answer(500, {"error": f"writing to {receiver.root} failed: {exc}"})

        def _serve(self, method: str, path: str, query: dict[str, list[str]]) -> None:
            if method == "POST" and path == "/finish":
                self._answer(200, {"finished": True})
                receiver.finished.set()
                return
            if not path.startswith("/files/"):
                raise RefusedRequestError(404, f"no route {method} {path}")
            rel = unquote(path.removeprefix("/files/"))
            if method == "GET":
                self._answer(200, receiver.check(rel, query))
                return
            if method != "PUT":
                raise RefusedRequestError(405, f"{method} is not allowed on /files")
            sha = _sha256_value(self.headers.get(SHA256_HEADER) or "")
            length = _content_length(self.headers.get("Content-Length"))
            if length > receiver.max_bytes:
                raise RefusedRequestError(413, f"{rel} is {length:,} bytes, more than this "
                                          f"receiver's limit of {receiver.max_bytes:,} "
                                          "(--max-bytes)")
            receiver.put(rel, sha, length, _body(self.rfile, length, receiver.touch))
            self._answer(201, {"written": rel})

        def do_GET(self) -> None:
            self._route("GET")

        def do_PUT(self) -> None:
            self._route("PUT")

        def do_POST(self) -> None:
            self._route("POST")

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise listen_error("the data receiver", host, port, "--port", exc) from exc
    server.daemon_threads = True
    return server


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the transfer token {path}: {exc.strerror}") from exc
    if not token:
        raise ConfigError(f"the transfer token file {path} is empty")
    return token


def serve(receiver: Receiver, host: str, port: int, *,
          idle_timeout: float = DEFAULT_IDLE_TIMEOUT) -> int:
    """Serve until ``POST /finish`` (returns 0) or ``idle_timeout`` without requests (1)."""
    server = make_server(receiver, host, port)
    print(f"receiving into {receiver.root} on {host}:{server.server_port}", flush=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              daemon=True)
    thread.start()
    try:
        while not receiver.finished.wait(1.0):
            if time.monotonic() - receiver.last_request > idle_timeout:
                logger.error("No upload request for %.0f s; the receiver into %s stops.",
                             idle_timeout, receiver.root)
                return 1
        logger.info("The upload into %s is finished.", receiver.root)
        return 0
    finally:
        server.shutdown()
        server.server_close()


__all__ = ["DEFAULT_MAX_BYTES", "RECEIVER_PORT", "SHA256_HEADER", "TOKEN_HEADER", "Receiver",
           "RefusedRequestError", "make_server", "read_token", "safe_relative", "serve"]
