"""Score against ``elasticps serve`` while a job follows a stream, and print the freshness seen.

    python examples/online/client.py --url http://127.0.0.1:8500 --stream /tmp/clicks

The client sends ``POST /score`` with a few random impressions every ``--every`` seconds. Each
answer names the version that scored it; the first answer from a version it has not seen makes
it ask ``GET /version`` which stream partitions that version trained through. A partition's
*freshness as served* is the time from its commit (its manifest's modification time) to the
first answer from a version trained through it. The client stops once the stream has its
``_END`` marker and an answer came from a version trained through the last partition (or after
``--timeout`` seconds), then prints one JSON line: per partition its freshness, and their median
and max (``--json FILE`` writes it too).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from elasticps.data.stream import FsspecPartitionSource

USERS, ITEMS = 2000, 500  # the id spaces make_stream.py writes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="elasticps serve's address (http://HOST:PORT)")
    p.add_argument("--stream", required=True, help="the stream's prefix")
    p.add_argument("--rows", type=int, default=16, help="impressions per request")
    p.add_argument("--every", type=float, default=0.05, help="seconds between requests")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this long")
    p.add_argument("--json", default=None, help="write the result here too")
    args = p.parse_args(argv)
    if args.rows < 1 or args.every < 0 or args.timeout <= 0:
        p.error("--rows must be >= 1, --every >= 0 and --timeout > 0")
    return args


class Server:
    """One keep-alive connection to ``elasticps serve``."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None
             ) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer); (0, {}) while the server is not reachable."""
        try:
            self.connection.request(method, path,
                                    body=None if body is None else json.dumps(body).encode())
            answer = self.connection.getresponse()
            return answer.status, json.loads(answer.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError):
            self.connection.close()
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
            return 0, {}


class Freshness:
    """Per partition, commit to the first answer from a version trained through it."""

    def __init__(self, stream: str) -> None:
        self.source = FsspecPartitionSource(stream)
        self.newest_of: dict[int, str | None] = {}  # version -> newest partition trained
        self.seen: set[int] = set()
        self.served: dict[str, float] = {}  # partition -> seconds
        self.last_newest: str | None = None

    def answered(self, version: int, at: float, server: Server) -> None:
        """An answer from ``version`` arrived at ``at`` (wall clock)."""
        if version in self.seen:
            return
        if version not in self.newest_of:
            status, doc = server.call("GET", "/version")
            if status == 200 and isinstance(doc.get("version"), int):
                stream = (doc.get("position") or {}).get("stream") or {}
                self.newest_of[doc["version"]] = stream.get("newest")
        if version not in self.newest_of:
            return  # /version already names a newer one: its first answer counts
        self.seen.add(version)
        newest = self.newest_of[version]
        if newest is None or (self.last_newest is not None and newest <= self.last_newest):
            return
        for partition in self.source.partitions(self.last_newest):
            if partition.name > newest:
                break
            committed = self.source.committed_at(partition)
            if committed is not None:
                self.served[partition.name] = round(at - committed, 3)
        self.last_newest = newest

    def complete(self) -> bool:
        """The stream ended and the newest answer's version trained through its last partition."""
        if not self.source.ended():
            return False
        partitions = self.source.partitions(None)
        return bool(partitions) and self.last_newest == partitions[-1].name

    def result(self) -> dict[str, Any]:
        seconds = list(self.served.values())
        return {"partitions": self.served,
                "freshness_served_s": {
                    "median": round(statistics.median(seconds), 3) if seconds else None,
                    "max": max(seconds) if seconds else None},
                "newest_served": self.last_newest}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = Server(args.url)
    freshness = Freshness(args.stream)
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + args.timeout
    answers = 0
    while time.monotonic() < deadline:
        users, items = rng.integers(0, USERS, args.rows), rng.integers(0, ITEMS, args.rows)
        rows = [{"user": int(u), "item": int(i)} for u, i in zip(users, items, strict=True)]
        status, doc = server.call("POST", "/score", {"rows": rows})
        if status == 200:
            answers += 1
            freshness.answered(int(doc["version"]), time.time(), server)
            if freshness.complete():
                break
        time.sleep(args.every)
    result = {**freshness.result(), "answers": answers, "complete": freshness.complete()}
    print(json.dumps(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
