"""A status URL answered by someone else: another user binds a dead master's port and streams
an endless body. `elasticps status` (and the launcher's watch, `ui` and chaos, which read it the
same way) stop at 8 MiB and say so, instead of reading it all."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from elasticps.launch.scale import JOB_FILE
from elasticps.master.status_read import MAX_STATUS_BYTES, fetch_status
from elasticps.store import open_store
from elasticps.store.keys import MASTER_ADDRESS, MasterAddress
from tests.helpers import run_cli, wait_for


@dataclass
class Endless:
    """A server whose every answer is an endless body; it counts what it sent."""

    server: ThreadingHTTPServer
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"


@pytest.fixture
def endless() -> Iterator[Endless]:
    block = b"[" * (64 << 10)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                while state.sent < 1 << 30:  # a bound for the test itself: 1 GiB
                    self.wfile.write(block)
                    state.sent += len(block)
            except OSError:
                pass  # the reader hung up
            finally:
                state.done.set()

    state = Endless(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    thread = threading.Thread(target=state.server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.server.shutdown()
    state.server.server_close()


def test_status_of_a_local_job_stops_reading_an_endless_answer(endless: Endless,
                                                               tmp_path: Path) -> None:
    store_url = f"file://{tmp_path}/store.db"
    with open_store(store_url, "rogue") as store:  # the dead master's address
        store.put(MASTER_ADDRESS, MasterAddress("127.0.0.1:1", endless.http, "master-0").encode())
    (tmp_path / JOB_FILE).write_text(json.dumps(
        {"store": store_url, "job_name": "rogue", "launcher_pid": os.getpid()}))
    result = run_cli("status", "--workdir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "job rogue (local" in result.stdout
    assert f"the answer at http://{endless.http}/api/status is larger than 8 MiB" in \
        result.stderr
    wait_for(endless.done.is_set, 10, "the server to see the reader hang up")
    # What it read, plus what the sockets' buffers took in, not a byte of the rest.
    assert endless.sent < MAX_STATUS_BYTES + (32 << 20)


def test_the_launchers_fetch_bounds_an_endless_answer(endless: Endless) -> None:
    assert fetch_status(endless.http) is None
    assert endless.sent < MAX_STATUS_BYTES + (32 << 20)
