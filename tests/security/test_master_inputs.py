"""What a trainer sends the master is bounded: a dataset URL of a scheme the job does not allow
is refused before anything is fetched, a 2 MiB failure reason is cut to a few KiB before it is
logged and persisted, and an oversized trainer name is refused."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.data.synth import synth_ctr
from elasticps.errors import InvalidArgumentError, RemoteError
from elasticps.master.client import MasterClient
from elasticps.master.options import MasterOptions
from elasticps.master.server import MasterServer
from elasticps.master.snapshot import decode_task
from elasticps.master.task_queue import QueuePolicy
from elasticps.store import Store, open_store
from elasticps.store.keys import master_task_key
from tests.helpers import job_credentials, wait_for


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


@pytest.fixture
def master(store: Store, job_name: str) -> Iterator[MasterServer]:
    options = MasterOptions(job=job_name, credentials=job_credentials(job_name, "master"),
                            lease_ttl=2, policy=QueuePolicy(max_failures=5))
    server = MasterServer(store, options)  # the real data layer, default schemes (file)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(server.serving.is_set, 30, "the master to serve")
    yield server
    server.stop()
    thread.join(timeout=10)


class Counting(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:
        Counting.requests.append(self.path)
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_dataset_url_of_another_scheme_is_not_fetched(master: MasterServer, store: Store,
                                                        job_name: str) -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = MasterClient(store, job_credentials(job_name), "t0")
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/dataset"
        with pytest.raises(RemoteError, match="PADDLE_DATA_SCHEMES=file"):
            client.set_dataset(url, 1, 1, BatchPlan(4))
        assert Counting.requests == []
    finally:
        client.close()
        httpd.shutdown()


def test_reasons_are_cut_and_names_bounded(master: MasterServer, store: Store, job_name: str,
                                           tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "ds"
    synth_ctr(str(data), 200, seed=1, rows_per_chunk=100, chunks_per_file=2)
    client = MasterClient(store, job_credentials(job_name), "t0")
    try:
        client.register_trainer()
        client.set_dataset(str(data), 1, 1, BatchPlan(4))
        task = client.get_task(0).task
        assert client.task_failed(task, "x" * (2 << 20))
        record = store.get(master_task_key(task.task_id))  # what the master persisted
        assert record is not None
        assert len(record.value) < 3000
        assert decode_task(record.value).last_error.startswith("trainer t0 reported: xxx")
        logged = [r.getMessage() for r in caplog.records if "failed task" in r.getMessage()]
        assert len(logged) == 1
        assert len(logged[0]) < 3000
        assert logged[0].endswith("more characters cut).")
        long_name = MasterClient(store, job_credentials(job_name), "n" * 1000)
        with pytest.raises(InvalidArgumentError, match="trainer must be 1-253"):
            long_name.get_task(0)
        long_name.close()
    finally:
        client.close()
