"""The model directory: versions published under a pointer written last, so a reader racing a
writer only ever loads complete versions; old chains retired, the newest kept; a server that
holds a version applies only the deltas after it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from elasticps.trainer import model_dir
from elasticps.trainer.export import export_model
from elasticps.trainer.export_chain import (
    ExportChainError,
    State,
    advance,
    load_state,
    read_link,
)
from elasticps.trainer.model_dir import (
    Draft,
    ModelDirError,
    VersionRecord,
    VersionTakenError,
    publish,
    read_latest,
    retire,
    retired,
)

LAYERS = {"emb": {"table": "t", "dim": 4, "kind": "embedding", "columns": "c"}}
VERSIONS = 15  # published while the readers read
ROWS = 2000  # big enough that writing a version takes a while next to reading the pointer


def writer(step: int):  # type: ignore[no-untyped-def]
    """Writes the model of training step ``step``: dense "w" all ``step``; every row's first
    value ``step``, so a reader can tell any version's content from its number."""

    def write(directory: Path, draft: Draft) -> None:
        ids = np.arange(ROWS, dtype=np.int64)
        rows = np.full((ROWS, 4), float(step), np.float32)
        rows[:, 1] = ids  # rows differ, so a delta holds what changed
        export_model(directory, {"w": np.full((3, 3), float(step), np.float32)},
                     {"t": (ids, rows)}, LAYERS, draft.meta, parent=draft.parent)

    return write


def publish_step(root: Path, step: int, kind: str = "delta") -> VersionRecord:
    return publish(root, kind, writer(step), position={"step": step},
                   committed_at=1000.0 + step)


def content_step(state: State) -> float:
    value = float(state.dense["w"][0, 0])
    assert np.all(state.dense["w"] == value)
    assert np.all(state.sparse["t"][1][:, 0] == value)
    return value


def test_versions_are_numbered_and_the_pointer_records_the_position(tmp_path: Path) -> None:
    assert read_latest(tmp_path) is None
    first = publish_step(tmp_path, 10, "full")
    second = publish_step(tmp_path, 20)
    assert (first.version, first.kind, first.base, first.depth) == (1, "full", 1, 0)
    assert (second.version, second.kind, second.base, second.depth) == (2, "delta", 1, 1)
    latest = read_latest(tmp_path)
    assert latest == second
    assert latest.position == {"step": 20}
    assert latest.committed_at == 1020.0
    assert latest.published_at >= time.time() - 60
    manifest = json.loads((tmp_path / "versions/000002/manifest.json").read_text())
    assert manifest["kind"] == "delta"
    assert manifest["meta"] == {"version": 2, "base": 1, "depth": 1, "position": {"step": 20},
                                "committed_at": 1020.0}
    assert content_step(load_state(tmp_path / latest.path)) == 20.0


def test_a_delta_without_a_published_version_is_a_full_one(tmp_path: Path) -> None:
    assert publish_step(tmp_path, 1, "delta").kind == "full"


@pytest.mark.slow  # threads racing for two seconds
def test_a_reader_racing_a_writer_only_ever_loads_complete_versions(tmp_path: Path) -> None:
    """One thread publishes VERSIONS versions (a full one every 4) while four threads read the
    pointer and load what it names, over and over: every load succeeds and holds exactly the
    content of the version the pointer named, and the versions seen only go up."""
    publish_step(tmp_path, 0, "full")
    done = threading.Event()
    problems: list[str] = []
    seen: list[list[int]] = [[] for _ in range(4)]

    def write_all() -> None:
        try:
            for step in range(1, VERSIONS + 1):
                publish_step(tmp_path, step, "full" if step % 4 == 0 else "delta")
        finally:
            done.set()

    def read_all(mine: list[int]) -> None:
        state = None
        while not done.is_set() or not mine or mine[-1] < VERSIONS + 1:
            try:
                latest = read_latest(tmp_path)
                assert latest is not None
                state = advance(state, tmp_path / latest.path)
            except (ExportChainError, OSError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                return
            if content_step(state) != latest.position["step"]:
                problems.append(f"version {latest.version} holds step {content_step(state)}")
                return
            mine.append(latest.version)

    threads = [threading.Thread(target=read_all, args=(s,)) for s in seen]
    threads.append(threading.Thread(target=write_all))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not problems, problems[:3]
    for versions in seen:
        assert versions == sorted(versions)
        assert versions[-1] == VERSIONS + 1
    # The readers saw versions change under them, not just the last one.
    assert len({v for versions in seen for v in versions}) >= 5


def test_two_writers_never_share_a_version_and_the_pointer_never_goes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    publish_step(tmp_path, 1, "full")
    stale = model_dir.next_draft(tmp_path, "delta", {})  # a writer that read LATEST = 1...
    publish_step(tmp_path, 2)  # ...while another publishes version 2
    monkeypatch.setattr(model_dir, "next_draft", lambda *args: stale)
    with pytest.raises(VersionTakenError, match=r"version 2 .* published by another writer"):
        publish_step(tmp_path, 9)
    monkeypatch.undo()
    assert read_latest(tmp_path).version == 2
    assert content_step(load_state(tmp_path / "versions/000002")) == 2.0
    assert [p.name for p in (tmp_path / "versions").iterdir() if p.name.startswith(".")] == []
    # A writer that claimed version 3 finds the pointer already past it: left as it is.
    late = model_dir.next_draft(tmp_path, "full", {})
    later = VersionRecord(5, model_dir.version_path(5), "full", 5, 0)
    model_dir.write_pointer(tmp_path, later)
    monkeypatch.setattr(model_dir, "next_draft", lambda *args: late)
    with pytest.raises(VersionTakenError, match="already names version 5, after 3"):
        publish_step(tmp_path, 3, "full")
    assert read_latest(tmp_path) == later


def test_retire_keeps_the_newest_chains_and_what_a_writer_has_in_flight(tmp_path: Path) -> None:
    kinds = ["full", "delta", "delta", "full", "delta", "full", "delta"]
    for step, kind in enumerate(kinds, 1):
        publish_step(tmp_path, step, kind)
    assert retire(tmp_path, keep=2) == [1, 2, 3]
    assert model_dir.published_versions(tmp_path) == [4, 5, 6, 7]
    assert content_step(load_state(tmp_path / "versions/000007")) == 7.0
    assert content_step(load_state(tmp_path / "versions/000005")) == 5.0


def test_the_retirement_plan() -> None:
    latest = VersionRecord(7, model_dir.version_path(7), "delta", 6, 1)
    bases = {1: 1, 2: 1, 3: 3, 4: 3, 5: None, 6: 6, 7: 6, 8: 8}
    assert retired(bases, latest, keep=1) == [1, 2, 3, 4, 5]
    assert retired(bases, latest, keep=2) == [1, 2, 5]  # 8 is a writer's, after the latest
    assert retired(bases, latest, keep=9) == [5]  # unreadable: never a chain to keep


def test_stale_temporary_directories_go_and_fresh_ones_stay(tmp_path: Path) -> None:
    publish_step(tmp_path, 1, "full")
    old = tmp_path / model_dir.VERSIONS / ".tmp-000002-dead"
    fresh = tmp_path / model_dir.VERSIONS / ".tmp-000002-live"
    old.mkdir()
    fresh.mkdir()
    long_ago = time.time() - model_dir.STALE_TMP_S - 10
    os.utime(old, (long_ago, long_ago))
    retire(tmp_path, keep=1)
    assert not old.exists()
    assert fresh.exists()


def test_advance_applies_only_the_deltas_after_the_version_held(tmp_path: Path) -> None:
    for step, kind in enumerate(["full", "delta", "delta", "delta"], 1):
        publish_step(tmp_path, step, kind)
    held = load_state(tmp_path / "versions/000002")
    # Version 2's files may go once it is held: advancing reads only 3 and 4.
    for name in ("versions/000001", "versions/000002"):
        for file in (tmp_path / name).iterdir():
            file.unlink()
    state = advance(held, tmp_path / "versions/000004")
    assert content_step(state) == 4.0
    assert state.sha256 == read_link(tmp_path / "versions/000004").sha256
    # A state not on the chain: the chain is read from its base.
    publish_step(tmp_path, 5, "full")
    assert content_step(advance(state, tmp_path / "versions/000005")) == 5.0


@pytest.mark.parametrize(("text", "message"), [
    ("{", "is not JSON"),
    ('{"format": "other"}', "not an elasticps model directory pointer"),
    ('{"format": "elasticps.model-dir/1", "version": 3}', "malformed"),
    ('{"format": "elasticps.model-dir/1", "version": 3, "path": "../../etc", "kind": "full",'
     ' "base": 3, "depth": 0, "committed_at": 0, "published_at": 0}', "at '../../etc'"),
    ('{"format": "elasticps.model-dir/1", "version": -1, "path": "versions/-00001",'
     ' "kind": "full", "base": 3, "depth": 0, "committed_at": 0, "published_at": 0}',
     "malformed"),
])
def test_a_bad_pointer_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "LATEST").write_text(text)
    with pytest.raises(ModelDirError, match=message):
        read_latest(tmp_path)
