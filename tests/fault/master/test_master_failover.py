"""SIGKILL the leading master mid-pass: the standby takes over, no task is lost.

Real processes (two masters), a real store (etcd and the embedded one), trainer threads that
fetch and finish tasks over gRPC through ``MasterClient``, driven by the trainer's own task loop.
At the end, for every pass, the chunks of the accepted finishes are exactly the dataset's
chunks, and the master counted every task once per pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.master.client import MasterClient
from elasticps.proto import master_pb2
from elasticps.store import Store, open_store
from elasticps.store.keys import read_master_address
from tests.helpers import REPO, job_credentials, wait_for
from tests.integration.master.helpers import store_url_for, synthetic_chunks
from tests.task_workers import Collect, task_loop

TOKEN = "fault-token"
TTL = 2  # election lease: the takeover bound is TTL + a few seconds
NUM_CHUNKS, PER_TASK, PASSES = 120, 2, 2
NUM_TASKS = NUM_CHUNKS // PER_TASK


@pytest.fixture(params=["etcd", "embedded"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, tmp_path)


def start_master(store_url: str, job: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fault.master.master_proc", store_url, job, TOKEN,
             str(NUM_CHUNKS), str(PER_TASK), str(PASSES), str(TTL), "3"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)


def leader_node(store: Store) -> str | None:
    address = read_master_address(store)
    return None if address is None else address.node


def row_batches(chunk: master_pb2.Chunk, start: int) -> Iterator[list[int]]:
    for begin in range(start, chunk.num_rows, 25):
        yield list(range(begin, min(begin + 25, chunk.num_rows)))


@pytest.mark.slow
def test_standby_takes_over_after_sigkill_and_no_task_is_lost(
        store_url: str, job_name: str, tmp_path: Path) -> None:
    store = open_store(store_url, job_name)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_master(store_url, job_name, tmp_path / "master-0.log"))
        wait_for(lambda: leader_node(store) is not None, 30, "the first master to lead")
        first = leader_node(store)
        procs.append(start_master(store_url, job_name, tmp_path / "master-1.log"))
        wait_for(lambda: store.get("master/election") is not None, 5, "the lock")

        finished: list[list[tuple[int, int, int]]] = [[] for _ in range(3)]
        errors: list[BaseException] = []

        def train(i: int) -> None:
            client = MasterClient(store, job_credentials(job_name, token=TOKEN), f"trainer-{i}",
                                  retry_for=60, rpc_timeout=5, lease_ttl=TTL)
            client.register_trainer()
            try:
                original = client.finish_and_get

                def record(task: master_pb2.Task, records: int, batches: int,
                           pass_id: int) -> tuple[bool, master_pb2.GetTaskResponse]:
                    accepted, following = original(task, records, batches, pass_id)
                    if accepted:
                        finished[i].append((task.pass_id, task.task_id, records))
                    return accepted, following

                # The loop finishes every task with the call that also fetches the next one.
                client.finish_and_get = record  # type: ignore[method-assign]
                task_loop(client, row_batches, 25, Collect(keep=False),
                          trainer_name=client.trainer, report_every=2).run()
            except BaseException as exc:
                errors.append(exc)
            finally:
                client.close()

        threads = [threading.Thread(target=train, args=(i,), daemon=True) for i in range(3)]
        for thread in threads:
            thread.start()
        wait_for(lambda: sum(len(f) for f in finished) >= 10, 60, "a third of pass 0")
        assert sum(len(f) for f in finished) < NUM_TASKS * PASSES, "killed too late"
        killed_at = time.monotonic()
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(timeout=10)
        wait_for(lambda: leader_node(store) not in (None, first), TTL + 15,
                 "the standby to publish its address")
        takeover = time.monotonic() - killed_at
        print(f"\nmaster takeover ({store_url.split(':')[0]}): {takeover:.2f}s "
              f"(kill -> standby serving; election TTL {TTL}s)")
        assert takeover < TTL + 6

        for thread in threads:
            thread.join(timeout=90)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        chunks = synthetic_chunks(NUM_CHUNKS)
        for pass_id in range(PASSES):
            tasks = sorted(t for f in finished for p, t, _ in f if p == pass_id)
            assert tasks == list(range(NUM_TASKS)), f"pass {pass_id}: {tasks}"
            covered = sorted(c for t in tasks for c in range(t * PER_TASK, (t + 1) * PER_TASK))
            assert [chunks[c] for c in covered] == chunks
        client = MasterClient(store, job_credentials(job_name, token=TOKEN), "observer")
        status = client.status()
        assert status["master"] != first
        assert status["state"] == "succeeded"
        assert status["tasks_finished_total"] == NUM_TASKS * PASSES
        assert status["records_total"] == NUM_CHUNKS * 100 * PASSES
        client.close()
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        store.close()
