"""Pserver processes over real gRPC and a real store: routing, training, validation at the edge,
exactly-once, auth, the init protocol, and concurrent pushes from several processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from elasticps.proto import common_pb2, pserver_pb2, pserver_pb2_grpc
from elasticps.pserver.client import PServerClient
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.rpc import JobCredentials, call, encode_tensor, make_channel
from elasticps.rpc.tls import peer_options
from elasticps.store import Store, open_store
from elasticps.store.keys import PSERVER_INIT_DONE
from tests.helpers import REPO, job_credentials
from tests.integration.pserver.harness import PServers

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
INIT = pserver_pb2.Initializer
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[5, 3], optimizer=OPT(kind=OPT.SGD, lr=0.1)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=4, id_space=1000, optimizer=OPT(kind=OPT.SGD, lr=0.1),
         initializer=INIT(kind=INIT.UNIFORM, scale=0.05, seed=1)),
]
W0 = np.arange(15, dtype=np.float32).reshape(5, 3) / 10


def _batches(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(5, 3)).astype(np.float32),
             rng.integers(0, 1000, 200).astype(np.int64),
             rng.normal(size=(200, 4)).astype(np.float32)) for _ in range(n)]


def _reference(batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ShardState:
    """The same training on one in-process shard: what N shards over gRPC must equal."""
    ref = ShardState(0, 1)
    ref.declare(SPECS)
    ref.init_dense({"w": W0.reshape(-1)})
    for seq, (w, ids, rows) in enumerate(batches):
        ref.push(BatchKey(0, 0, seq), {"w": w.reshape(-1)}, {"emb": (ids, rows)})
    return ref


@pytest.fixture
def cluster(tmp_path: Path, job_name: str, etcd_server) -> Iterator[tuple[PServers, Store]]:
    store = open_store(etcd_server.url, job_name)
    # 600 ids per request: the pulls of all 1000 ids (500 a shard) pass, the test's 601 do not.
    servers = PServers(tmp_path, etcd_server.url, job_name, num=2,
                       PADDLE_MAX_IDS_PER_REQUEST="600")
    try:
        procs = [servers.start(), servers.start()]
        servers.wait_slots(store, {p.pid for p in procs})
        yield servers, store
    finally:
        servers.stop_all()
        store.close()


def test_two_pservers_train_like_one_and_validate_at_the_edge(cluster) -> None:
    servers, store = cluster
    creds = job_credentials(servers.job)
    batches = _batches(6)
    with PServerClient(store, creds, 2, deadline=30) as client:
        client.declare_tables(SPECS)
        client.initialize({"w": W0})
        assert store.get(PSERVER_INIT_DONE) is not None
        np.testing.assert_array_equal(client.pull_dense()["w"], W0)
        for seq, (w, ids, rows) in enumerate(batches):
            responses = client.push(common_pb2.BatchRef(pass_id=0, task_id=0, seq=seq),
                                    {"w": w}, {"emb": (ids, rows)})
            assert [r.applied for r in responses] == [True, True]
        ref = _reference(batches)
        all_ids = np.arange(1000, dtype=np.int64)[::-1].copy()  # caller's order is kept
        np.testing.assert_allclose(client.pull_dense()["w"].reshape(-1),
                                   ref.pull_dense()["w"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(client.pull_sparse("emb", all_ids),
                                   ref.pull_sparse("emb", all_ids), rtol=1e-6, atol=1e-7)
        before_w = client.pull_dense()["w"]
        before_rows = client.pull_sparse("emb", all_ids)

        # A duplicate BatchRef is not re-applied on any shard.
        w, ids, rows = batches[0]
        dup = client.push(common_pb2.BatchRef(pass_id=0, task_id=0, seq=0), {"w": w},
                          {"emb": (ids, rows)})
        assert [r.applied for r in dup] == [False, False]

        # NaN in one shard's part drops the whole batch on every shard (counted, recorded).
        nan_w = np.ones((5, 3), np.float32)
        nan_w[4, 2] = np.nan  # the last element lies in shard 1's slice
        skipped = client.push(common_pb2.BatchRef(pass_id=0, task_id=0, seq=99), {"w": nan_w},
                              {"emb": (ids, rows)})
        assert [(r.applied, r.skipped) for r in skipped] == [(True, True), (True, True)]
        np.testing.assert_array_equal(client.pull_dense()["w"], before_w)
        np.testing.assert_array_equal(client.pull_sparse("emb", all_ids), before_rows)

        # Bad pushes straight at shard 0 over the wire: clear errors, nothing changes.
        address = client._shards[0].address
        stub = pserver_pb2_grpc.ParameterServerStub(make_channel(address, creds, "pserver"))
        batch = common_pb2.BatchRef(pass_id=9, task_id=9, seq=0)
        good_dense = pserver_pb2.NamedTensor(name="w",
                                             tensor=encode_tensor(np.ones(8, np.float32)))
        def sparse(ids: list[int], rows: np.ndarray) -> pserver_pb2.SparseGrad:
            return pserver_pb2.SparseGrad(table="emb", grad=common_pb2.SparseRows(
                ids=encode_tensor(np.array(ids, dtype=np.int64)), rows=encode_tensor(rows)))

        def dense(name: str, tensor: common_pb2.Tensor) -> pserver_pb2.NamedTensor:
            return pserver_pb2.NamedTensor(name=name, tensor=tensor)

        zeros = np.zeros((2, 4), np.float32)
        short = common_pb2.Tensor(dtype=common_pb2.FLOAT32, shape=[8], data=b"\0" * 31)
        bad = [
            (pserver_pb2.PushRequest(batch=batch, dense=[good_dense],
                                     sparse=[sparse([2, 1000], zeros)]),
             InvalidArgumentError, "1000"),
            (pserver_pb2.PushRequest(batch=batch, dense=[good_dense],
                                     sparse=[sparse([2, 3], zeros)]),
             InvalidArgumentError, "belongs to shard 1"),
            (pserver_pb2.PushRequest(batch=batch, dense=[
                dense("w", encode_tensor(np.ones(8, np.float64)))]),
             InvalidArgumentError,
             r"dense gradient\[.w.\] has dtype FLOAT64, expected FLOAT32 or BFLOAT16"),
            (pserver_pb2.PushRequest(batch=batch, dense=[
                dense("nope", encode_tensor(np.ones(8, np.float32)))]),
             NotFoundError, "nope"),
            (pserver_pb2.PushRequest(dense=[good_dense]), InvalidArgumentError, "BatchRef"),
            (pserver_pb2.PushRequest(batch=batch, dense=[dense("w", short)]),
             InvalidArgumentError, "31 bytes"),
            (pserver_pb2.PushRequest(batch=batch, dense=[good_dense], sparse=[
                sparse(list(range(0, 1202, 2)), np.zeros((601, 4), np.float32))]),
             ResourceExhaustedError, "'emb': 601 ids in one push; the cap is 600"),
        ]
        for request, error, match in bad:
            with pytest.raises(error, match=match):
                call(stub.Push, request, timeout=10)
        np.testing.assert_array_equal(client.pull_dense()["w"], before_w)
        np.testing.assert_array_equal(client.pull_sparse("emb", all_ids), before_rows)
        stats = client.stats()
        assert stats["pushes"] == 12
        assert stats["duplicates"] == 2
        assert stats["skipped_nonfinite"] == 2
        # Rows come from pushes only: the pulls of all 1000 ids above created none.
        pushed = np.unique(np.concatenate([ids for _, ids, _ in batches]))
        assert pushed.size < 1000
        assert stats["rows"] == pushed.size + 15

        # A call without the job token, or with a wrong one, is refused; so is plaintext.
        wrong = JobCredentials(servers.job, "wrong-token", creds.tls)
        with pytest.raises(UnauthenticatedError, match="wrong job token"):
            call(pserver_pb2_grpc.ParameterServerStub(
                make_channel(address, wrong, "pserver")).Stats,
                pserver_pb2.StatsRequest(), timeout=10)
        import grpc

        assert creds.tls is not None
        no_token = grpc.secure_channel(address, creds.tls.channel_credentials(),
                                       options=peer_options(servers.job, "pserver"))
        with pytest.raises(UnauthenticatedError, match="missing job token"):
            call(pserver_pb2_grpc.ParameterServerStub(no_token).Stats,
                 pserver_pb2.StatsRequest(), timeout=10)
        bare = pserver_pb2_grpc.ParameterServerStub(grpc.insecure_channel(address))
        with pytest.raises(UnavailableError):
            call(bare.Stats, pserver_pb2.StatsRequest(), timeout=10)


def test_exactly_one_trainer_initialises(cluster) -> None:
    servers, store = cluster
    creds = job_credentials(servers.job)
    clients = [PServerClient(store, creds, 2, deadline=30, name=f"t{i}") for i in range(4)]
    calls: list[str] = []
    errors: list[BaseException] = []

    def trainer(i: int) -> None:
        def init_fn() -> dict[str, np.ndarray]:
            calls.append(f"t{i}")
            return {"w": np.full((5, 3), float(i), np.float32)}
        try:
            clients[i].declare_tables(SPECS)
            clients[i].initialize({}, init_fn=init_fn)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=trainer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert len(calls) == 1
        winner = int(calls[0][1:])
        for client in clients:  # every trainer sees the winner's values
            np.testing.assert_array_equal(client.pull_dense()["w"], np.full((5, 3), winner))
    finally:
        for client in clients:
            client.close()


WORKER = """
import sys, numpy as np
from elasticps.proto import common_pb2
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from tests.helpers import job_credentials
from tests.integration.pserver.test_processes import SPECS, _batches
store = open_store(sys.argv[1], sys.argv[2])
k, workers = int(sys.argv[3]), int(sys.argv[4])
with PServerClient(store, job_credentials(sys.argv[2]), 2, deadline=30) as client:
    client.declare_tables(SPECS)
    for seq, (w, ids, rows) in enumerate(_batches(24)):
        if seq % workers == k:
            client.push(common_pb2.BatchRef(pass_id=0, task_id=0, seq=seq), {"w": w},
                        {"emb": (ids, rows)})
store.close()
"""


def test_concurrent_pushes_from_processes_equal_serial(cluster, etcd_server, job_name) -> None:
    servers, store = cluster
    creds = job_credentials(servers.job)
    with PServerClient(store, creds, 2, deadline=30) as client:
        client.declare_tables(SPECS)
        client.initialize({"w": W0})
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
               "ELASTICPS_TEST_TLS_ROOT": os.environ["ELASTICPS_TEST_TLS_ROOT"]}
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, etcd_server.url, job_name,
                                     str(k), "3"], env=env) for k in range(3)]
        assert [w.wait(timeout=120) for w in workers] == [0, 0, 0]
        ref = _reference(_batches(24))
        all_ids = np.arange(1000, dtype=np.int64)
        # SGD updates commute: any interleaving equals the serial result up to rounding.
        np.testing.assert_allclose(client.pull_dense()["w"].reshape(-1), ref.pull_dense()["w"],
                                   atol=1e-5)
        np.testing.assert_allclose(client.pull_sparse("emb", all_ids),
                                   ref.pull_sparse("emb", all_ids), atol=1e-5)
        applied = client.list_applied(0)
        for shard in applied:
            assert [(t.task_id, t.below, list(t.extra)) for t in shard.tasks] == [(0, 24, [])]


def test_one_pserver_takes_rows_in_any_order_as_the_shard_does(
        tmp_path: Path, job_name: str, etcd_server) -> None:
    """One shard: ids and rows travel as they are (no routing copies), calls run on the
    caller's thread; sorted unique ids, any order, repeats and held marks all come back as an
    in-process shard gives them."""
    store = open_store(etcd_server.url, job_name)
    servers = PServers(tmp_path, etcd_server.url, job_name, num=1)
    try:
        servers.wait_slots(store, {servers.start().pid})
        batches = _batches(4, seed=3)
        ref = _reference(batches)
        with PServerClient(store, job_credentials(servers.job), 1, deadline=30) as client:
            client.declare_tables(SPECS)
            client.initialize({"w": W0})
            for seq, (w, ids, rows) in enumerate(batches):
                responses = client.push(common_pb2.BatchRef(pass_id=0, task_id=0, seq=seq),
                                        {"w": w}, {"emb": (ids, rows)})
                assert [r.applied for r in responses] == [True]
            trained = np.unique(np.concatenate([ids for _, ids, _ in batches]))
            never = np.setdiff1d(np.arange(1000), trained)[:50]
            sorted_unique = np.union1d(trained, never)  # some rows, some start values
            shuffled = np.random.default_rng(0).permutation(
                np.concatenate([sorted_unique, sorted_unique[:30]]))  # repeats, any order
            for ids in (sorted_unique, shuffled, sorted_unique[::-1].copy()):
                rows = client.pull_sparse("emb", ids)
                np.testing.assert_array_equal(rows, ref.pull_sparse("emb", ids))
                assert rows.flags.writeable
                held_rows, held = client.pull_held("emb", ids)
                np.testing.assert_array_equal(held_rows, rows)
                np.testing.assert_array_equal(held, np.isin(ids, trained))
    finally:
        servers.stop_all()
        store.close()
