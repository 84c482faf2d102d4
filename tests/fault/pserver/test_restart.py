"""Pserver crashes: SIGKILL, restart from the newest good checkpoint, corrupt checkpoints skipped,
a kill in the middle of a checkpoint write, trainers waiting instead of crashing."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import numpy as np

from elasticps.proto import common_pb2, pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.client import PServerClient
from elasticps.store import open_store
from tests.helpers import job_credentials, run_cli, wait_for
from tests.integration.pserver.harness import PServers

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
SPECS = [
    SPEC(name="w", kind=SPEC.DENSE, shape=[6], optimizer=OPT(kind=OPT.ADAM, lr=0.01)),
    SPEC(name="emb", kind=SPEC.SPARSE, dim=4, id_space=0, optimizer=OPT(kind=OPT.ADAGRAD, lr=0.1)),
]
IDS = np.array([0, 1, 7, 2**40, 123_456_789], dtype=np.int64)


def _push(client: PServerClient, seq: int) -> list[pserver_pb2.PushResponse]:
    rng = np.random.default_rng(seq)
    return client.push(common_pb2.BatchRef(pass_id=0, task_id=1, seq=seq),
                       {"w": rng.normal(size=6).astype(np.float32)},
                       {"emb": (IDS, rng.normal(size=(5, 4)).astype(np.float32))})


def _applied_in_newest_checkpoint(ckpts: ShardCheckpoints) -> int:
    manifests = ckpts.manifests()
    return manifests[0].applied_batches if manifests else -1


def _applied_seqs(client: PServerClient) -> list[int]:
    (shard,) = client.list_applied(0)
    assert len(shard.tasks) <= 1
    return [s for t in shard.tasks for s in (*range(t.below), *t.extra)]


def test_restart_restores_newest_good_checkpoint_and_skips_a_corrupt_one(
    tmp_path: Path, job_name: str
) -> None:
    store_url = f"file://{tmp_path}/job.db"
    ckpt_url = f"file://{tmp_path}/ckpt"
    store = open_store(store_url, job_name)
    servers = PServers(tmp_path, store_url, job_name, num=1, PADDLE_CHECKPOINT_URL=ckpt_url,
                       PADDLE_CHECKPOINT_INTERVAL="0.2", PADDLE_CHECKPOINT_KEEP="3")
    ckpts = ShardCheckpoints(ckpt_url, 0, 1)
    try:
        first = servers.start()
        with PServerClient(store, job_credentials(job_name), 1, deadline=60) as client:
            client.declare_tables(SPECS)
            client.initialize({"w": np.linspace(0, 1, 6, dtype=np.float32)})
            _push(client, 0)
            wait_for(lambda: _applied_in_newest_checkpoint(ckpts) == 1, 30, "checkpoint 1")
            good = ckpts.manifests()[0]
            good_w, good_rows = client.pull_dense()["w"], client.pull_sparse("emb", IDS)
            _push(client, 1)
            wait_for(lambda: _applied_in_newest_checkpoint(ckpts) == 2, 30, "checkpoint 2")
            newest = ckpts.manifests()[0]
            servers.kill(first)
            # Flip one bit of the newest checkpoint: the restart must detect it and fall back.
            data_path = tmp_path / "ckpt" / "shard-0-of-1" / newest.data
            raw = bytearray(data_path.read_bytes())
            raw[-7] ^= 0x10
            data_path.write_bytes(bytes(raw))
            inspect = run_cli("checkpoint", "inspect", ckpt_url, env={"PATH": "/usr/bin:/bin"})
            assert inspect.returncode == 1, inspect.stderr
            assert f"checkpoint {newest.id}" in inspect.stdout
            assert "checksum BAD" in inspect.stdout
            assert inspect.stdout.count("checksum ok") == 1  # the older, good checkpoint
            assert "table    emb: sparse dim 4, id space unbounded, 5 rows" in inspect.stdout

            # The trainer keeps waiting while the shard is down, then goes on.
            second = servers.start()
            servers.wait_slots(store, {second.pid})
            stats = client.stats()["shards"][0]
            assert stats["restored_from"] == good.id
            assert stats["initialized"]
            np.testing.assert_array_equal(client.pull_dense()["w"], good_w)
            np.testing.assert_array_equal(client.pull_sparse("emb", IDS), good_rows)
            assert _applied_seqs(client) == [0]
            # Batch 0 is a duplicate on the restored shard; batch 1 was lost, so it applies.
            assert [r.applied for r in _push(client, 0)] == [False]
            assert [r.applied for r in _push(client, 1)] == [True]
            # The recovered pserver keeps checkpointing.
            wait_for(lambda: ckpts.manifests()[0].id > newest.id
                     and ckpts.manifests()[0].applied_batches == 2, 30, "a new checkpoint")
            servers.kill(second, signal.SIGTERM)
            assert second.returncode == 0
            assert store.get_prefix("pserver/slot/") == []  # a clean exit frees the slot
    finally:
        servers.stop_all()
        store.close()


def test_sigkill_during_checkpoint_write_restarts_from_a_good_one(
    tmp_path: Path, job_name: str
) -> None:
    store_url = f"file://{tmp_path}/job.db"
    ckpt_url = f"file://{tmp_path}/ckpt"
    shard_dir = tmp_path / "ckpt" / "shard-0-of-1"
    store = open_store(store_url, job_name)
    servers = PServers(tmp_path, store_url, job_name, num=1, PADDLE_CHECKPOINT_URL=ckpt_url,
                       PADDLE_CHECKPOINT_INTERVAL="0.2")
    ckpts = ShardCheckpoints(ckpt_url, 0, 1)
    try:
        # Save number 2 pauses after its data file is written and fsynced, before the rename.
        first = servers.start(module="tests.fault.pserver.paused_pserver")
        with PServerClient(store, job_credentials(job_name), 1, deadline=60) as client:
            client.declare_tables(SPECS)
            client.initialize({"w": np.zeros(6, np.float32)})
            _push(client, 0)
            wait_for(lambda: _applied_in_newest_checkpoint(ckpts) == 1, 30, "checkpoint 1")
            good = ckpts.manifests()[0]
            expected_w = client.pull_dense()["w"]
            _push(client, 1)
            wait_for(lambda: list(shard_dir.glob(".tmp-*.paused")), 30, "the paused write")
            servers.kill(first)  # SIGKILL mid-write
            assert list(shard_dir.glob(".tmp-ckpt-*.safetensors.*"))  # the torn temp file

            # Meanwhile a trainer pushes: it must wait for the shard, not crash.
            results: list[object] = []
            pusher = threading.Thread(target=lambda: results.append(_push(client, 2)))
            pusher.start()
            second = servers.start()
            pusher.join(timeout=60)
            assert len(results) == 1, servers.logs()
            stats = client.stats()["shards"][0]
            assert stats["restored_from"] == good.id
            assert _applied_seqs(client) == [0, 2]  # batch 1 was lost with the crash
            assert not list(shard_dir.glob(".tmp-*"))  # leftovers cleaned up
            assert [r.applied for r in _push(client, 1)] == [True]
            assert not np.array_equal(client.pull_dense()["w"], expected_w)
            meta = json.loads(store.get(f"pserver/checkpoint/0/{good.id}").value)
            assert meta["sha256"] == good.sha256
            second.kill()
            second.wait(timeout=30)
    finally:
        servers.stop_all()
        store.close()
