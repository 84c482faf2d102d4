"""A small in-process HTTP server speaking the Kubernetes API's JSON for the calls elasticps
makes: create / read / list (labelSelector) / patch (JSON Patch) / delete objects of any
collection, pod logs, the service proxy, and the pod proxy (forwarded, as the API server does,
to a real server a test starts on a local port to stand for the pod). It records every request,
can be told to fail chosen ones, and calls a test's hooks when objects are created or deleted
(standing for the controllers that would start and stop pods), so the client paths are
exercised over real HTTP without a cluster. Like the API server's garbage collector, deleting
an object deletes the objects of its namespace whose ``metadata.ownerReferences`` all name
deleted uids (and theirs in turn); the fake does it at once, the collector a moment later."""

from __future__ import annotations

import base64
import http.client
import json
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jsonpatch
import jsonpointer

_ITEM = re.compile(
    r"^(?P<collection>/(?:api/v1|apis/[^/]+/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+))"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>.+))?)?$"
)

_POD_PROXY = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<pod>[^/:]+):(?P<port>[0-9]+)/proxy"
    r"(?P<rest>/.*)?$")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]  # lower-case names


@dataclass
class Fault:
    method: str
    path_pattern: str
    status: int
    reason: str
    times: int = 1_000_000


@dataclass
class FakeKube:
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    proxy_pages: dict[tuple[str, str, str], str] = field(default_factory=dict)
    live_logs: dict[tuple[str, str, str], queue.Queue[str | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    # (namespace, pod) -> the local port of the server standing for that pod
    pod_ports: dict[tuple[str, str], int] = field(default_factory=dict)
    on_create: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)
    on_delete: list[Callable[[str, str], None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> FakeKube:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                live = fake.live_stream(self.command, self.path)
                if live is not None:
                    self._stream(live)
                    return
                status, body, ctype = fake.handle(self.command, self.path, raw, headers)
                if self.command == "POST" and status == 201:
                    for hook in fake.on_create:
                        hook(body)
                if self.command == "DELETE" and status == 200:
                    match = _ITEM.match(unquote(urlsplit(self.path).path))
                    assert match is not None
                    for gone in fake.on_delete:
                        gone(match["collection"], match["name"])
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, lines: queue.Queue[str | None]) -> None:
                # As the API server sends a followed log: chunked, a chunk as lines come,
                # the last chunk when the container stops.
                self.protocol_version = "HTTP/1.1"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                while (line := lines.get()) is not None:
                    data = line.encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def do_DELETE(self) -> None:
                self._handle()

            def do_PATCH(self) -> None:
                self._handle()

            def do_PUT(self) -> None:
                self._handle()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-bearer-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester",
                                                      "namespace": namespace}}],
        }))
        return path

    # -- state helpers for tests --------------------------------------------------------

    def put(self, collection: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.objects.setdefault(collection, {})[obj["metadata"]["name"]] = obj

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], *,
                annotations: dict[str, str] | None = None, phase: str = "Running",
                ready: bool = True, restarts: int = 0, created: str = "2030-01-01T00:00:00Z",
                ) -> None:
        self.put(f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": annotations or {}, "creationTimestamp": created},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [{"name": "c", "restartCount": restarts}]},
        })

    def live_log(self, namespace: str, pod: str, container: str) -> queue.Queue[str | None]:
        """A followed log fed line by line by the test (None ends it): streamed as it comes."""
        with self.lock:
            return self.live_logs.setdefault((namespace, pod, container), queue.Queue())

    def live_stream(self, method: str, raw_path: str) -> queue.Queue[str | None] | None:
        split = urlsplit(raw_path)
        query = parse_qs(split.query)
        match = _ITEM.match(unquote(split.path))
        if method != "GET" or match is None or match["sub"] != "log" \
                or query.get("follow") != ["true"]:
            return None
        key = (match["ns"], match["name"], query.get("container", [""])[0])
        with self.lock:
            stream = self.live_logs.get(key)
            if stream is not None:
                self.requests.append(Recorded(method, unquote(split.path), query, None, {}))
            return stream

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    # -- the pod proxy ------------------------------------------------------------------

    def _proxy_to_pod(self, method: str, match: re.Match[str], query: str, raw: bytes,
                      headers: dict[str, str]) -> tuple[int, Any, str]:
        """Forward to the server standing for the pod, as the API server's pod proxy does: the
        rest of the path as sent (still percent-encoded), the caller's headers but its
        credentials, the pod's answer unchanged; an unreachable pod is a 503 Status."""
        ns, pod = unquote(match["ns"]), unquote(match["pod"])
        with self.lock:
            self.requests.append(Recorded(method, unquote(match[0]), parse_qs(query), None,
                                          headers))
            port = self.pod_ports.get((ns, pod))
        if port is None:
            return 404, self._status(404, "NotFound", f'pods "{pod}" not found'), \
                "application/json"
        sent = {k: v for k, v in headers.items()
                if k not in ("authorization", "host", "content-length", "connection")}
        target = (match["rest"] or "/") + (f"?{query}" if query else "")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request(method, target, body=raw, headers=sent)
            response = connection.getresponse()
            return response.status, response.read(), \
                response.getheader("Content-Type") or "text/plain"
        except OSError as exc:
            return 503, self._status(503, "ServiceUnavailable",
                                     f"error trying to reach service: {exc}"), \
                "application/json"
        finally:
            connection.close()

    # -- the API ------------------------------------------------------------------------

    def _collect_garbage(self, namespace: str, uid: str | None) -> None:
        """Delete (under the lock) every object in ``namespace`` left with no live owner
        once ``uid`` is gone, recursively: background propagation."""
        deleted = {uid} if uid else set()
        while deleted:
            orphans: list[tuple[dict[str, Any], str]] = []
            for collection, items in self.objects.items():
                if f"/namespaces/{namespace}/" not in collection:
                    continue
                for name, obj in items.items():
                    owners = {ref.get("uid") for ref in
                              obj["metadata"].get("ownerReferences") or []}
                    if owners and owners & deleted and not owners & self._live_uids():
                        orphans.append((items, name))
            deleted = set()
            for items, name in orphans:
                deleted.add(items.pop(name)["metadata"].get("uid"))

    def _live_uids(self) -> set[str]:
        return {obj["metadata"].get("uid") for items in self.objects.values()
                for obj in items.values()}

    @staticmethod
    def _status(code: int, reason: str, message: str) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "reason": reason, "message": message, "code": code}

    def handle(self, method: str, raw_path: str, raw: bytes,
               headers: dict[str, str]) -> tuple[int, Any, str]:
        split = urlsplit(raw_path)
        path = unquote(split.path)  # the API server routes on the decoded path
        query = parse_qs(split.query)
        pod_proxy = _POD_PROXY.match(split.path)
        if pod_proxy is not None:
            return self._proxy_to_pod(method, pod_proxy, split.query, raw, headers)
        body = json.loads(raw) if raw else None
        with self.lock:
            self.requests.append(Recorded(method, path, query, body, headers))
            for fault in self.faults:
                if fault.method == method and re.search(fault.path_pattern, path) \
                        and fault.times > 0:
                    fault.times -= 1
                    return fault.status, self._status(fault.status, fault.reason,
                                                      f"injected {fault.reason}"), \
                        "application/json"
        match = _ITEM.match(path)
        if match is None:
            return 404, self._status(404, "NotFound", f"no route {path}"), \
                "application/json"
        collection, ns, name, sub = match["collection"], match["ns"], match["name"], match["sub"]
        with self.lock:
            items = self.objects.setdefault(collection, {})
            if sub == "log":
                key = (ns, name, query.get("container", [""])[0])
                if key not in self.logs:
                    return 404, self._status(404, "NotFound", f"no log for {key}"), \
                        "application/json"
                return 200, self.logs[key].encode(), "text/plain"
            if sub == "proxy":
                page = self.proxy_pages.get((ns, name, query.get("path", [""])[0]))
                if page is None:
                    return 503, self._status(503, "ServiceUnavailable", "no endpoints"), \
                        "application/json"
                return 200, page.encode(), "application/json"
            if method == "POST" and name is None:
                obj_name = body["metadata"]["name"]
                if obj_name in items:
                    return 409, self._status(
                        409, "AlreadyExists", f"{match['plural']} \"{obj_name}\" already exists"
                    ), "application/json"
                stored = json.loads(json.dumps(body))
                stored["metadata"].setdefault("uid", f"uid-{len(self.requests)}")
                stored["metadata"].setdefault("creationTimestamp", time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                if stored.get("kind") == "Secret" and "stringData" in stored:
                    # as the API server does: stringData is write-only, stored base64 in data
                    stored.setdefault("data", {}).update(
                        {k: base64.b64encode(v.encode()).decode()
                         for k, v in stored.pop("stringData").items()})
                items[obj_name] = stored
                return 201, stored, "application/json"
            if method == "GET" and name is None:
                wanted = dict(part.split("=", 1) for part in
                              query.get("labelSelector", [""])[0].split(",") if part)
                found = [o for o in items.values()
                         if wanted.items() <= (o["metadata"].get("labels") or {}).items()]
                return 200, {"kind": "List", "apiVersion": "v1", "items": found}, \
                    "application/json"
            if name is not None and name not in items:
                return 404, self._status(404, "NotFound",
                                         f"{match['plural']} \"{name}\" not found"), \
                    "application/json"
            if method == "GET" and name is not None:
                return 200, items[name], "application/json"
            if method == "PATCH" and name is not None:
                if headers.get("content-type") != "application/json-patch+json":
                    return 415, self._status(415, "UnsupportedMediaType",
                                             str(headers.get("content-type"))), \
                        "application/json"
                try:
                    items[name] = jsonpatch.apply_patch(items[name], body)
                except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                    return 422, self._status(422, "Invalid", f"the patch failed: {exc}"), \
                        "application/json"
                return 200, items[name], "application/json"
            if method == "DELETE" and name is not None:
                gone = items.pop(name)
                self._collect_garbage(ns, gone["metadata"].get("uid"))
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, \
                    "application/json"
        return 405, self._status(405, "MethodNotAllowed", method), "application/json"
