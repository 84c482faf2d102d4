"""Sync mode over real pserver processes, real gRPC and a real store.

Parity: k trainers (each its own client, as separate processes would be) with batch b take the
same steps as one trainer with batch k*b, to float tolerance: the loss is a mean, so the big
batch's gradient is the mean of the k small ones, which the step barrier applies once.
Liveness: a trainer SIGKILLed while the others wait for it in a barrier does not deadlock them;
its store lease expires and the pservers stop waiting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.client import PServerClient
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.store import Lease, Store, open_store
from elasticps.store.keys import TrainerRegistration, trainer_key
from tests.helpers import REPO, job_credentials, wait_for
from tests.integration.pserver.harness import PServers

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
INIT = pserver_pb2.Initializer
DIM, DENSE_IN, IDS_PER_ROW, ID_SPACE = 4, 3, 3, 200
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[DIM + DENSE_IN],
         optimizer=OPT(kind=OPT.ADAM, lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=DIM, id_space=ID_SPACE,
         optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1, eps=1e-8, initial_accumulator=0.1),
         initializer=INIT(kind=INIT.UNIFORM, scale=0.1, seed=3)),
]
W0 = np.linspace(-0.5, 0.5, DIM + DENSE_IN).astype(np.float32)
K, B, STEPS = 3, 8, 4  # trainers, each one's batch, steps


def _data(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(ids [K*B, 3], x [K*B, 3], y [K*B]) per step: trainer i's part is rows i*B..(i+1)*B."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, ID_SPACE, (K * B, IDS_PER_ROW)).astype(np.int64),
             rng.normal(size=(K * B, DENSE_IN)).astype(np.float32),
             rng.integers(0, 2, K * B).astype(np.float32)) for _ in range(STEPS)]


def _grads(w: np.ndarray, unique: np.ndarray, rows: np.ndarray, ids: np.ndarray,
           x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of a mean logistic loss: the dense one and one row per id in ``unique``."""
    wt = torch.tensor(w, requires_grad=True)
    table = torch.tensor(rows, requires_grad=True)
    pooled = table[torch.tensor(np.searchsorted(unique, ids))].sum(1)
    logits = pooled @ wt[:DIM] + torch.tensor(x) @ wt[DIM:]
    torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor(y)).backward()
    assert wt.grad is not None
    assert table.grad is not None
    return wt.grad.numpy(), table.grad.numpy()


def _step(pull_dense, pull_rows, ids, x, y):
    unique = np.unique(ids)
    dense, rows = _grads(pull_dense(), unique, pull_rows(unique), ids, x, y)
    return {"w": dense}, {"emb": (unique, rows)}


def _one_big_trainer(data) -> ShardState:
    """The reference: one trainer with batch K*B on one in-process shard (two shards over
    gRPC hold the same values: test_processes.py checks that split)."""
    shard = ShardState(0, 1)
    shard.declare(SPECS)
    shard.init_dense({"w": W0})
    for seq, (ids, x, y) in enumerate(data):
        dense, sparse = _step(lambda: shard.pull_dense(["w"])["w"],
                              lambda u: shard.pull_sparse("emb", u), ids, x, y)
        shard.push(BatchKey(0, 0, seq), dense, sparse)
    return shard


class _Trainer:
    """A registered trainer (its ``trainer/<name>`` key under its own lease) and its client."""

    def __init__(self, store: Store, job: str, name: str) -> None:
        self.name = name
        self.lease: Lease = store.grant_lease(2)
        self.lease.keep_alive()
        store.put(trainer_key(name), TrainerRegistration().encode(), self.lease.id)
        self.client = PServerClient(store, job_credentials(job), 2, deadline=60, name=name)

    def push(self, task: int, seq: int, dense, sparse):
        ref = common_pb2.BatchRef(pass_id=0, task_id=task, seq=seq, trainer=self.name)
        return self.client.push(ref, dense, sparse)

    def close(self) -> None:
        self.client.close()
        self.lease.revoke()


@pytest.fixture
def sync_job(tmp_path: Path, job_name: str, etcd_server) -> Iterator[tuple[PServers, Store]]:
    store = open_store(etcd_server.url, job_name)
    servers = PServers(tmp_path, etcd_server.url, job_name, num=2, PADDLE_TRAINING_MODE="sync")
    try:
        procs = [servers.start(), servers.start()]
        servers.wait_slots(store, {p.pid for p in procs})
        yield servers, store
    finally:
        servers.stop_all()
        store.close()


def _initialised(store: Store, job: str) -> PServerClient:
    client = PServerClient(store, job_credentials(job), 2, deadline=60, name="init")
    client.declare_tables(SPECS)
    client.initialize({"w": W0})
    return client


def test_k_trainers_with_batch_b_match_one_trainer_with_batch_kb(sync_job) -> None:
    servers, store = sync_job
    data = _data()
    admin = _initialised(store, servers.job)
    trainers = [_Trainer(store, servers.job, f"trainer-{i}") for i in range(K)]
    try:
        for t in trainers:
            t.client.declare_tables(SPECS)
            t.client.join_round(t.name)  # each began its task

        def train(i: int) -> None:
            t = trainers[i]
            for seq, (ids, x, y) in enumerate(data):
                part = slice(i * B, (i + 1) * B)
                dense, sparse = _step(lambda: t.client.pull_dense(["w"])["w"],
                                      lambda u: t.client.pull_sparse("emb", u),
                                      ids[part], x[part], y[part])
                assert all(r.applied for r in t.push(i, seq, dense, sparse))

        with ThreadPoolExecutor(K) as pool:
            for future in [pool.submit(train, i) for i in range(K)]:
                future.result(timeout=120)
        reference = _one_big_trainer(data)
        all_ids = np.arange(ID_SPACE, dtype=np.int64)
        w = admin.pull_dense(["w"])["w"]
        assert not np.allclose(w, W0)  # it trained
        np.testing.assert_allclose(w, reference.pull_dense(["w"])["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(admin.pull_sparse("emb", all_ids),
                                   reference.pull_sparse("emb", all_ids), rtol=1e-5, atol=1e-6)
        stats = admin.stats()
        assert [s["rounds"] for s in stats["shards"]] == [str(STEPS)] * 2
        assert stats["pushes"] == 2 * K * STEPS  # every batch recorded on both shards, once
    finally:
        for t in trainers:
            t.close()
        admin.close()


VICTIM = """
import sys
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from elasticps.store.keys import TrainerRegistration, trainer_key
from tests.helpers import job_credentials

url, job = sys.argv[1], sys.argv[2]
store = open_store(url, job)
lease = store.grant_lease(2)
lease.keep_alive()
store.put(trainer_key("victim"), TrainerRegistration().encode(), lease.id)
client = PServerClient(store, job_credentials(job), 2, deadline=60, name="victim")
client.join_round("victim")  # it began a task: the others' steps wait for its push
print("joined", flush=True)
sys.stdin.read()  # computes forever, until killed
"""


def test_a_trainer_killed_mid_barrier_does_not_deadlock_the_others(sync_job) -> None:
    servers, store = sync_job
    admin = _initialised(store, servers.job)
    survivors = [_Trainer(store, servers.job, name) for name in ("a", "b")]
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, store_url(servers), servers.job],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().strip() == b"joined"
        grads = [np.full(DIM + DENSE_IN, g, np.float32) for g in (1.0, 3.0)]
        no_rows = {"emb": (np.zeros(0, np.int64), np.zeros((0, DIM), np.float32))}
        with ThreadPoolExecutor(2) as pool:
            pushes = [pool.submit(t.push, i, 0, {"w": g}, no_rows)
                      for i, (t, g) in enumerate(zip(survivors, grads, strict=True))]

            def both_wait() -> bool:
                return all(int(s.get("round_waiting", 0)) == 2
                           for s in admin.stats()["shards"])

            wait_for(both_wait, 30, "a's and b's pushes to wait for the victim's")
            assert not any(p.done() for p in pushes)
            np.testing.assert_array_equal(admin.pull_dense(["w"])["w"], W0)
            killed = time.monotonic()
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            for push in pushes:
                assert all(r.applied for r in push.result(timeout=60))
            waited = time.monotonic() - killed
        # One Adam step of the mean gradient 2.0: each weight moves by lr.
        np.testing.assert_allclose(admin.pull_dense(["w"])["w"], W0 - 0.05, rtol=1e-5)
        assert waited < 30, f"the survivors waited {waited:.1f}s after the kill"
        # The next step needs only the survivors.
        with ThreadPoolExecutor(2) as pool:
            again = [pool.submit(t.push, i, 1, {"w": g}, no_rows)
                     for i, (t, g) in enumerate(zip(survivors, grads, strict=True))]
            assert all(r.applied for p in again for r in p.result(timeout=60))
        assert [int(s["rounds"]) for s in admin.stats()["shards"]] == [2, 2]
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
        for t in survivors:
            t.close()
        admin.close()


def store_url(servers: PServers) -> str:
    return servers.store_url
