"""Entries planted in a real checkpoint directory by someone else who can write it: a directory
named like a crashed write's leftover, links at the names a save writes to, FIFOs in place of a
manifest or a data file, a directory in place of a file being pruned. The pserver's restart
path (leftover removal, then restore), a save and `checkpoint inspect` go on, skipping each with
a warning; nothing is written through a link, and nothing blocks."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from elasticps.proto import pserver_pb2
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.checkpoint.manifest import data_name, manifest_name
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.store import open_store
from tests.helpers import run_cli

SPEC = pserver_pb2.TableSpec
OPT = pserver_pb2.OptimizerSpec


def _shard(pushes: int) -> ShardState:
    state = ShardState(0, 1)
    state.declare([SPEC(name="w", kind=SPEC.DENSE, shape=[4], optimizer=OPT(kind=OPT.SGD,
                                                                             lr=1.0))])
    state.init_dense({"w": np.zeros(4, dtype=np.float32)})
    for seq in range(pushes):
        state.push(BatchKey(0, 0, seq), {"w": np.ones(4, dtype=np.float32)}, {})
    return state


def test_a_planted_directory_and_fifo_named_like_leftovers_do_not_stop_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ckpt = ShardCheckpoints(str(tmp_path), 0, 1)
    saved = ckpt.save(_shard(2).snapshot()[0])
    shard_dir = Path(ckpt.dir)
    (shard_dir / ".tmp-x").mkdir()
    os.mkfifo(shard_dir / ".tmp-fifo")
    (shard_dir / ".tmp-ckpt-000000000009.json.123").write_bytes(b"torn")  # a real leftover
    # What a pserver does when it starts (server.py `_restore`), in a fresh object.
    restarted = ShardCheckpoints(str(tmp_path), 0, 1)
    with caplog.at_level(logging.WARNING):
        assert restarted.remove_temp_files() == 1
    loaded = restarted.load_newest()
    assert loaded is not None
    assert loaded[1].id == saved.id
    assert (shard_dir / ".tmp-x").is_dir()
    assert "it is a directory, not the leftover of a write" in caplog.text
    assert "it is a FIFO" in caplog.text


def test_a_save_never_writes_through_links_planted_at_its_temp_names(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file")
    ckpt = ShardCheckpoints(str(tmp_path / "ckpt"), 0, 1)
    shard_dir = Path(ckpt.dir)
    first = "000000000001"
    links = [shard_dir / f".tmp-{name}.{os.getpid()}"  # the names a save used to write to
             for name in (data_name(first), manifest_name(first))]
    for link in links:
        link.symlink_to(victim)
    saved = ckpt.save(_shard(1).snapshot()[0])
    assert saved.id == first
    assert victim.read_text() == "someone else's file"
    assert all(link.is_symlink() for link in links)
    assert ckpt.load_newest() is not None


def test_fifos_in_place_of_a_manifest_or_data_file_do_not_block(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ckpt = ShardCheckpoints(str(tmp_path), 0, 1)
    good = ckpt.save(_shard(1).snapshot()[0])
    bad = ckpt.save(_shard(2).snapshot()[0])
    shard_dir = Path(ckpt.dir)
    os.mkfifo(shard_dir / manifest_name("000000000099"))  # a "newer" manifest
    data = shard_dir / data_name(bad.id)
    data.unlink()
    os.mkfifo(data)
    with caplog.at_level(logging.WARNING):
        assert [m.id for m in ckpt.manifests()] == [bad.id, good.id]
    assert "is a FIFO, not a regular file" in caplog.text
    result = run_cli("checkpoint", "inspect", str(tmp_path))  # blocked on the FIFO before
    assert result.returncode == 1, result.stderr  # some checkpoint is bad
    assert "Traceback" not in result.stderr
    assert f"checkpoint {good.id}" in result.stdout
    assert "checksum ok" in result.stdout
    assert f"{data} is a FIFO, not a regular file" in result.stdout
    assert "manifest" in result.stdout


def test_a_directory_in_place_of_a_pruned_file_is_left_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(f"file://{tmp_path}/job.db", "planted")
    try:
        ckpt = ShardCheckpoints(str(tmp_path / "ckpt"), 0, 1, keep=1, store=store)
        old = ckpt.save(_shard(1).snapshot()[0])
        planted = Path(ckpt.dir) / data_name(old.id)
        planted.unlink()
        planted.mkdir()
        with caplog.at_level(logging.WARNING):
            new = ckpt.save(_shard(2).snapshot()[0])  # prunes `old`
        assert [m.id for m in ckpt.manifests()] == [new.id]
        assert planted.is_dir()
        assert "it is a directory, not a checkpoint file" in caplog.text
    finally:
        store.close()
