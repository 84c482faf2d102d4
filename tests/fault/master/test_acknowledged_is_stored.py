"""SIGKILL the master just after it acknowledged: everything it acknowledged is in the store.

The master answers a call only once the call's change is stored, in one transaction with the
changes of the calls that came meanwhile (group commit). Here many trainers (real gRPC, a real
master process on a real store) hand tasks back and fetch new ones concurrently, so
transactions carry several calls; the master is SIGKILLed from inside a trainer the moment an
acknowledgement arrives, while other calls are in flight. The store is then read directly: a
finish the master acknowledged must be recorded DONE, and a task it handed out must be
recorded as that trainer's at that epoch (or already DONE). A master that answered before its
write was stored would leave an acknowledged change missing here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from elasticps.errors import ElasticPSError
from elasticps.master.client import MasterClient
from elasticps.master.snapshot import decode_meta, decode_task
from elasticps.master.task_queue import TaskState
from elasticps.proto import master_pb2
from elasticps.store import open_store
from elasticps.store.keys import MASTER_STATE_META, MASTER_STATE_TASK_PREFIX, read_master_address
from tests.helpers import REPO, job_credentials, wait_for
from tests.integration.master.helpers import store_url_for

TOKEN = "ack-token"
TRAINERS = 16
NUM_CHUNKS = 2000  # one chunk a task, one pass: far more than are finished before the kill
KILL_AFTER = 80  # acknowledged finishes


@pytest.fixture(params=["etcd", "embedded"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, tmp_path)


class Acks:
    """What the master acknowledged, appended by trainer threads (list appends are atomic)."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, int]] = []  # (pass, task) finishes accepted
        self.handed: list[tuple[str, int, int]] = []  # (trainer, task, epoch) handed out
        self.killed = threading.Event()


def run_trainer(client: MasterClient, acks: Acks, kill: threading.Event) -> None:
    """Finish each task and fetch the next in one call until the master is gone."""
    try:
        client.register_trainer()
        answer = client.get_task(0)
        while answer.outcome == master_pb2.GetTaskResponse.TASK and not acks.killed.is_set():
            task = answer.task
            acks.handed.append((client.trainer, task.task_id, task.epoch))
            records = sum(chunk.num_rows for chunk in task.chunks)
            accepted, answer = client.finish_and_get(task, records, records // 10, 0)
            if accepted:
                acks.finished.append((task.pass_id, task.task_id))
                if len(acks.finished) >= KILL_AFTER:
                    kill.set()  # at once, from this thread: other calls are in flight
    except ElasticPSError:
        pass  # the master was killed under this call: it was not acknowledged


def test_every_acknowledged_change_is_in_the_store_after_sigkill(
        store_url: str, job_name: str, tmp_path: Path) -> None:
    store = open_store(store_url, job_name)
    with open(tmp_path / "master.log", "wb") as out:
        master = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.master.master_proc", store_url, job_name, TOKEN,
             str(NUM_CHUNKS), "1", "1", "2", "60"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    clients: list[MasterClient] = []
    try:
        wait_for(lambda: read_master_address(store) is not None, 30, "the master to lead")
        acks, kill = Acks(), threading.Event()
        for i in range(TRAINERS):
            # A short retry: once the master is dead, calls fail fast and the threads end.
            clients.append(MasterClient(store, job_credentials(job_name, token=TOKEN),
                                        f"trainer-{i}", retry_for=2, rpc_timeout=2))
        threads = [threading.Thread(target=run_trainer, args=(c, acks, kill), daemon=True)
                   for c in clients]
        for thread in threads:
            thread.start()
        assert kill.wait(60), f"only {len(acks.finished)} finishes were acknowledged"
        os.killpg(master.pid, signal.SIGKILL)
        acks.killed.set()
        master.wait(timeout=10)
        for thread in threads:
            thread.join(timeout=30)
        assert not any(t.is_alive() for t in threads)

        records = {int(kv.key.rsplit("/", 1)[1]): decode_task(kv.value)
                   for kv in store.get_prefix(MASTER_STATE_TASK_PREFIX)}
        meta = store.get(MASTER_STATE_META)
        assert meta is not None
        finished = sorted({task for _, task in acks.finished})
        assert len(finished) >= KILL_AFTER
        missing = [t for t in finished if t not in records
                   or records[t].state is not TaskState.DONE]
        assert not missing, f"acknowledged finishes not stored as DONE: {missing}"
        assert decode_meta(meta.value).tasks_finished_total >= len(finished)
        for trainer, task, epoch in acks.handed:
            stored = records.get(task)
            assert stored is not None, f"task {task} handed to {trainer} was never stored"
            assert stored.state is TaskState.DONE or (
                stored.owner == trainer and stored.epoch == epoch), (trainer, task, stored)
        assert len(records) < NUM_CHUNKS, "the pass ended before the kill"
    finally:
        for client in clients:
            client.close()
        if master.poll() is None:
            os.killpg(master.pid, signal.SIGKILL)
            master.wait(timeout=10)
        store.close()
