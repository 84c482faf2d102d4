"""``elasticps data upload``: a dataset copied to real fsspec targets (a local directory and
``memory://``), verified by sha256, resumed after an interruption, mismatches refused."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFile, MemoryFileSystem

from elasticps.data.upload import PARTIAL_SUFFIX, RECORD_NAME, dataset_url, upload
from elasticps.errors import ConfigError, DataError
from tests.helpers import run_cli


class StopUploadError(Exception):
    """Raised by a test's progress callback to stop an upload midway."""


class _FirstByteFlipped(MemoryFile):
    def write(self, data: Any) -> int:
        if self.tell() == 0 and len(data):
            data = bytes([data[0] ^ 1]) + bytes(data[1:])
        return super().write(data)


class CorruptingFileSystem(MemoryFileSystem):
    """An in-memory store whose writes arrive with their first byte flipped (a bad disk, a
    broken proxy), so the read-back check has something to catch."""

    protocol = "corruptmem"
    store: dict[str, Any] = {}  # fsspec's own class-level convention
    pseudo_dirs = [""]

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode.startswith("w"):
            file = _FirstByteFlipped(self, self._strip_protocol(path))
            file.commit()
            return file
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("corruptmem", CorruptingFileSystem, clobber=True)


def make_dataset(root: Path, files: int = 5, size: int = 50_000) -> Path:
    (root / "part").mkdir(parents=True)
    for i in range(files):
        (root / "part" / f"chunk-{i}.parquet").write_bytes(os.urandom(size))
    (root / "manifest.json").write_text(json.dumps({"chunks": files}))
    return root


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_upload_lays_out_by_namespace_and_verifies(tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr")
    result = upload(local, str(tmp_path / "store"), namespace="team-ml")
    assert result.url == f"{tmp_path / 'store'}/team-ml/ctr"
    assert result.copied == ["manifest.json", *(f"part/chunk-{i}.parquet" for i in range(5))]
    assert result.skipped == []
    dest = tmp_path / "store" / "team-ml" / "ctr"
    for rel in result.copied:
        assert (dest / rel).read_bytes() == (local / rel).read_bytes()
    record = json.loads((dest / RECORD_NAME).read_text())["files"]
    assert record["manifest.json"]["sha256"] == sha((local / "manifest.json").read_bytes())
    assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))

    again = upload(local, str(tmp_path / "store"), namespace="team-ml")
    assert again.copied == []
    assert len(again.skipped) == 6


def test_an_interrupted_upload_resumes_where_it_stopped(tmp_path: Path) -> None:
    base = f"memory://upload-{uuid.uuid4().hex}"
    local = make_dataset(tmp_path / "ctr")
    seen: list[str] = []

    def stop_after_three(path: str, copied: bool) -> None:
        seen.append(path)
        if len(seen) == 3:
            raise StopUploadError

    with pytest.raises(StopUploadError):
        upload(local, base, namespace="ml", name="ctr", on_file=stop_after_three)
    fs = fsspec.filesystem("memory")
    dest = dataset_url(base, "ml", "ctr")
    assert not fs.exists(f"{dest}/{RECORD_NAME}")  # not whole yet: no record
    # A kill in the middle of the fourth file leaves a partial copy behind.
    fourth = "part/chunk-2.parquet"
    fs.pipe(f"{dest}/{fourth}{PARTIAL_SUFFIX}", b"half a file")

    resumed = upload(local, base, namespace="ml", name="ctr")
    assert resumed.skipped == seen
    assert resumed.copied == ["part/chunk-2.parquet", "part/chunk-3.parquet",
                              "part/chunk-4.parquet"]
    assert resumed.bytes_copied == 3 * 50_000
    for rel in [*resumed.skipped, *resumed.copied]:
        assert fs.cat(f"{dest}/{rel}") == (local / rel).read_bytes()
    assert not fs.exists(f"{dest}/{fourth}{PARTIAL_SUFFIX}")
    assert fs.exists(f"{dest}/{RECORD_NAME}")


def test_a_different_file_at_the_destination_is_refused(tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr")
    store = tmp_path / "store"
    upload(local, str(store), namespace="ml")
    target = store / "ml" / "ctr" / "part" / "chunk-1.parquet"
    target.write_bytes(b"x" * 50_000)  # same size, other content: someone else's dataset
    before = {p: p.read_bytes() for p in (store / "ml" / "ctr").rglob("*") if p.is_file()}
    with pytest.raises(DataError, match=r"part/chunk-1\.parquet already exists with other "
                                        r"content.*--overwrite"):
        upload(local, str(store), namespace="ml")
    assert {p: p.read_bytes() for p in before} == before  # nothing changed
    fixed = upload(local, str(store), namespace="ml", overwrite=True)
    assert fixed.copied == ["part/chunk-1.parquet"]
    assert target.read_bytes() == (local / "part/chunk-1.parquet").read_bytes()


def test_a_copy_that_does_not_match_is_refused_and_removed(tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr", files=1)
    base = f"corruptmem://bucket-{uuid.uuid4().hex}"
    with pytest.raises(DataError, match="does not match the local file's"):
        upload(local, base, namespace="ml")
    fs = fsspec.filesystem("corruptmem")
    dest = dataset_url(base, "ml", "ctr")
    assert not fs.exists(f"{dest}/manifest.json")
    assert not fs.exists(f"{dest}/manifest.json{PARTIAL_SUFFIX}")
    assert not fs.exists(f"{dest}/{RECORD_NAME}")


def test_bad_arguments_name_the_bad_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        upload(tmp_path / "missing", "memory://x", namespace="ml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no files"):
        upload(tmp_path / "empty", "memory://x", namespace="ml")
    local = make_dataset(tmp_path / "ctr", files=1)
    with pytest.raises(ConfigError, match="'Team_ML' is not a DNS-1123 label"):
        upload(local, "memory://x", namespace="Team_ML")
    with pytest.raises(ConfigError, match=r"dataset name '\.\./up'"):
        upload(local, "memory://x", namespace="ml", name="../up")


def test_the_command_line(tmp_path: Path) -> None:
    local = make_dataset(tmp_path / "ctr", files=2)
    env = {**os.environ, "USER_NAMESPACE": "team-a"}
    done = run_cli("data", "upload", str(local), str(tmp_path / "store"), env=env)
    assert done.returncode == 0, done.stderr
    url = f"{tmp_path / 'store'}/team-a/ctr"
    assert f"job spec: data: {url}\n" in done.stdout
    assert "3 file(s) copied" in done.stdout
    assert (Path(url) / "part" / "chunk-1.parquet").exists()
    helped = run_cli("data", "upload", "--help", env=env)
    assert helped.returncode == 0
    assert "interruption" in helped.stdout
