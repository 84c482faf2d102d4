"""A truncated Parquet file costs its task, not the trainer: the master counts the failures.

Real pieces throughout: a synthetic dataset on disk with one file cut in half, the master
(``MasterServer``) over the embedded store, a pserver process, and an ``elasticps.Trainer``
training a small torch model through the real data layer. The trainer reports the unreadable
task failed each time it gets it; past ``max_failures`` the master marks it FAILED, the pass
ends without it (one bad task of six is within ``max_failed_fraction``) and training returns.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from elasticps.data import open_dataset
from elasticps.data.batch import TensorBatch
from elasticps.data.criteo_layout import SPARSE_COLUMNS
from elasticps.data.synth import synth_ctr
from elasticps.master.client import MasterClient
from elasticps.master.server import MasterOptions, MasterServer
from elasticps.master.task_queue import QueuePolicy
from elasticps.pserver.client import PServerClient
from elasticps.store import Store, open_store
from elasticps.trainer.dataset_reader import cloud
from elasticps.trainer.events import EndIteration, EndPass, Event
from elasticps.trainer.optim import SGD
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.trainer import Trainer
from tests.helpers import job_credentials, wait_for
from tests.integration.pserver.harness import PServers

ROWS, PER_CHUNK = 600, 100  # six chunks, one file each, one task each


class TinyCtr(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = SparseEmbedding("emb", 0, 2, columns=SPARSE_COLUMNS)
        self.out = torch.nn.Linear(13 + 26 * 2, 1)

    def forward(self, batch: TensorBatch) -> torch.Tensor:
        return self.out(torch.cat([batch.dense, self.embedding(batch).flatten(1)], 1)).squeeze(1)


@pytest.fixture
def store(tmp_path: Path, job_name: str) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", job_name)
    yield handle
    handle.close()


@pytest.fixture
def master(store: Store, job_name: str) -> Iterator[MasterServer]:
    policy = QueuePolicy(max_failures=2, max_failed_fraction=0.2)
    server = MasterServer(store, MasterOptions(job=job_name,
                                               credentials=job_credentials(job_name, "master"),
                                               lease_ttl=2,
                                               policy=policy))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(server.serving.is_set, 20, "the master to serve")
    yield server
    server.stop()
    thread.join(timeout=10)


@pytest.fixture
def pservers(tmp_path: Path, store: Store, job_name: str) -> Iterator[PServers]:
    group = PServers(tmp_path, f"file://{tmp_path}/job.db", job_name, 1)
    try:
        group.wait_slots(store, {group.start().pid})
        yield group
    finally:
        group.stop_all()


def test_a_truncated_chunk_ends_as_a_failed_task_and_training_goes_on(
        tmp_path: Path, store: Store, master: MasterServer, pservers: PServers) -> None:
    data = tmp_path / "ctr"
    synth_ctr(str(data), ROWS, seed=11, rows_per_chunk=PER_CHUNK, chunks_per_file=1)
    chunks = open_dataset(str(data)).chunks
    assert len(chunks) == 6
    bad = data / chunks[2].path
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # cut off mid-file

    credentials = job_credentials(master.options.job)
    client = MasterClient(store, credentials, "trainer-0", lease_ttl=2)
    params = PServerClient(store, credentials, 1, deadline=30, name="trainer-0")
    client.register_trainer()
    trainer = Trainer(TinyCtr(), optimizer=SGD(lr=0.01), progress_every=1)
    events: list[Event] = []
    try:
        trainer.attach(params, client, "trainer-0")
        stats = trainer.train(cloud(str(data), batch_size=50), num_passes=1,
                              event_handler=events.append)
        status = client.status()
    finally:
        trainer.close()
        params.close()
        client.close()

    # The trainer lived: it trained every row of the five good chunks once and closed the pass.
    assert stats.tasks == 5
    assert stats.samples == ROWS - PER_CHUNK
    assert sum(isinstance(e, EndIteration) for e in events) == 5 * PER_CHUNK // 50
    assert [e.pass_id for e in events if isinstance(e, EndPass)] == [0]
    # The master counted the bad task's failures and failed it for the pass; the job went on.
    assert status["state"] == "succeeded", status
    assert status["failures_total"] == 2
    assert status["counts"] == {"todo": 0, "pending": 0, "done": 5, "failed": 1}
    assert status["records_total"] == ROWS - PER_CHUNK
    (failed,) = status["failed_tasks"]
    assert failed["task"] == 2
    assert "trainer trainer-0 reported: DataError: cannot open Parquet file" in failed["reason"]
    assert chunks[2].path in failed["reason"]
    assert [(e["pass"], e["task"]) for e in status["failure_log"]] == [(0, 2)]
