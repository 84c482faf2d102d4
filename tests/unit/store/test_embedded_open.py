"""Opening the embedded store from many threads at once while its file is being created."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.store.embedded_store import EmbeddedStore


@pytest.mark.slow
def test_concurrent_opens_of_a_new_file_all_succeed(tmp_path: Path) -> None:
    # While one connection switches a new file to WAL, SQLite answers another's switch with
    # "database is locked" at once (no busy handler there). Before the store retried that,
    # about 1 opening in 200 of this race raised a raw sqlite3 error.
    errors: list[BaseException] = []
    for attempt in range(150):
        path = tmp_path / f"job-{attempt}.db"
        gate = threading.Barrier(8, timeout=30)

        def open_and_write(path: Path = path, gate: threading.Barrier = gate) -> None:
            try:
                gate.wait()
                with EmbeddedStore(path, "/job/") as store:
                    store.put("k", b"v")
            except BaseException as exc:  # collected: the assertion names them
                errors.append(exc)

        threads = [threading.Thread(target=open_and_write, daemon=True) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


def test_a_new_file_is_private_and_an_existing_one_of_ours_is_made_private(
        tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    with EmbeddedStore(fresh, "/job/") as store:
        store.put("k", b"v")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
        assert stat.S_IMODE(fresh.with_name("fresh.db-wal").stat().st_mode) == 0o600
    # a store file left world-readable (a workdir from before files were private)
    old = tmp_path / "old.db"
    with EmbeddedStore(old, "/job/") as store:
        store.put("k", b"v")
    old.chmod(0o644)
    wal = old.with_name("old.db-wal")
    wal.touch()
    wal.chmod(0o644)
    with EmbeddedStore(old, "/job/") as store:
        assert store.get("k") is not None
        assert stat.S_IMODE(old.stat().st_mode) == 0o600
        assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    # one that others could write is not trusted at all: anyone may have put keys in it
    wal.touch()  # (the last close removed it)
    wal.chmod(0o666)
    with pytest.raises(ConfigError, match=r"old.db-wal.*mode 0666\) can be written by other"):
        EmbeddedStore(old, "/job/")
