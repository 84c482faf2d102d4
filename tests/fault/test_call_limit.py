"""A job with more concurrent callers than its servers take calls at once still completes.

The master (in this process) and a real pserver process take at most 2 calls at once
(``PADDLE_MAX_CONCURRENT_RPCS=2``; 128 in a real job) and refuse the rest unread with
RESOURCE_EXHAUSTED. 16 trainers, each its own MasterClient + PServerClient (own connections)
running the real task loop, call both at once. The clients retry the refusals with backoff, so
every trainer finishes and every batch is applied exactly once: each batch's gradient is 1 on a
dense SGD table with lr 1, so the parameter equals ``-(batches applied)``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elasticps.data.batch_plan import BatchPlan
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.task_queue import QueuePolicy
from elasticps.proto import common_pb2, master_pb2, pserver_pb2
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from elasticps.trainer.task_batches import TaskBatch
from elasticps.trainer.task_loop import LoopState
from tests.helpers import job_credentials, wait_for
from tests.integration.master.helpers import synthetic_chunks
from tests.integration.pserver.harness import TOKEN, PServers
from tests.task_workers import Collect, task_loop

LIMIT = 2  # calls each server runs at once
TRAINERS = 16
CHUNKS, ROWS, BATCH_SIZE = 12, 100, 25  # 12 tasks of 4 batches
OPT = pserver_pb2.OptimizerSpec
SPECS = [pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=[4],
                               optimizer=OPT(kind=OPT.SGD, lr=1.0))]


def rows_of(chunk: master_pb2.Chunk, start: int) -> Iterator[range]:
    for begin in range(start, chunk.num_rows, BATCH_SIZE):
        yield range(begin, min(begin + BATCH_SIZE, chunk.num_rows))


class PushingWorker(Collect):
    """Pushes a gradient of ones per batch and pulls the dense table back, as a trainer does."""

    def __init__(self, params: PServerClient) -> None:
        super().__init__(keep=False)
        self.params = params

    def train(self, item: TaskBatch, next_batch: Any | None) -> None:
        ref = common_pb2.BatchRef(pass_id=item.pass_id, task_id=item.task_id, seq=item.seq)
        self.params.push(ref, {"w": np.ones(4, dtype=np.float32)}, {})
        self.params.pull_dense()
        super().train(item, next_batch)


@pytest.fixture
def servers(tmp_path: Path, job_name: str) -> Iterator[tuple[Any, MasterServer]]:
    store_url = f"file://{tmp_path}/job.db"
    store = open_store(store_url, job_name)
    pservers = PServers(tmp_path, store_url, job_name, 1,
                        PADDLE_MAX_CONCURRENT_RPCS=str(LIMIT))
    master = None
    thread = None
    try:
        pservers.wait_slots(store, {pservers.start().pid})
        options = MasterOptions(job=job_name, credentials=job_credentials(job_name, "master",
                                                                          TOKEN),
                                lease_ttl=2, num_pservers=1, max_concurrent_rpcs=LIMIT,
                                policy=QueuePolicy(task_lease=60.0, reconcile=True),
                                dataset="synthetic", chunks_per_task=1, num_passes=1,
                                batch_plan=BatchPlan(BATCH_SIZE))
        master = MasterServer(store, options, lambda url: synthetic_chunks(CHUNKS, rows=ROWS))
        thread = threading.Thread(target=master.run, daemon=True)
        thread.start()
        wait_for(master.serving.is_set, 30, "the master to serve")
        yield store, master
    finally:
        if master is not None and thread is not None:
            master.stop()
            thread.join(timeout=10)
        pservers.stop_all()
        store.close()


def test_a_job_with_more_concurrent_callers_than_the_call_limit_completes(
        servers: tuple[Any, MasterServer], job_name: str,
        caplog: pytest.LogCaptureFixture) -> None:
    store, _ = servers
    caplog.set_level(logging.DEBUG, logger="elasticps.retry")  # refusals are retried quietly
    credentials = job_credentials(job_name, token=TOKEN)
    outcomes: dict[int, LoopState | BaseException] = {}
    start = threading.Barrier(TRAINERS)

    def trainer(i: int) -> None:
        name = f"trainer-{i}"
        try:
            with PServerClient(store, credentials, 1, deadline=60, name=name) as params:
                master = MasterClient(store, credentials, name, retry_for=60, lease_ttl=5)
                try:
                    start.wait(timeout=60)  # every trainer calls at once from here on
                    params.declare_tables(SPECS)
                    params.initialize({"w": np.zeros(4, dtype=np.float32)})
                    master.register_trainer()
                    loop = task_loop(master, rows_of, BATCH_SIZE, PushingWorker(params),
                                     trainer_name=name, report_every=1)
                    outcomes[i] = loop.run()
                finally:
                    master.close()
        except BaseException as exc:  # reported below, with the trainer's index
            outcomes[i] = exc

    threads = [threading.Thread(target=trainer, args=(i,), daemon=True)
               for i in range(TRAINERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert outcomes == {i: LoopState.DONE for i in range(TRAINERS)}
    # The servers did refuse calls (else this test proves nothing), and the clients waited.
    refused = [r.getMessage() for r in caplog.records if "RESOURCE_EXHAUSTED" in r.getMessage()]
    assert refused, "no call was refused: the limit was never reached"
    with PServerClient(store, credentials, 1, deadline=30) as params:
        np.testing.assert_array_equal(params.pull_dense()["w"],
                                      np.full(4, -CHUNKS * ROWS / BATCH_SIZE, np.float32))
