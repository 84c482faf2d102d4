"""safe_files on a real local directory: no write through an entry already at a temp name, no
read through a link or of a FIFO, no removal of anything but a file or a link."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pytest

from elasticps import safe_files
from elasticps.safe_files import create_temp, open_regular, read_regular, remove_file

LOCAL = fsspec.filesystem("file")


def test_create_temp_never_opens_an_existing_entry(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    # Someone who could guess every name: each one tried is already a link to the victim.
    monkeypatch.setattr(safe_files.secrets, "token_hex", lambda n: "0" * 2 * n)
    (tmp_path / f".tmp-x.{'0' * 16}").symlink_to(victim)
    with pytest.raises(OSError, match="already holds every temporary name"):
        create_temp(LOCAL, str(tmp_path), ".tmp-x.")
    assert victim.read_text() == "keep"


def test_create_temp_makes_a_new_file_with_the_umask_mode(tmp_path: Path) -> None:
    handle, path = create_temp(LOCAL, str(tmp_path), ".tmp-x.", ".part")
    with handle:
        handle.write(b"data")
    assert Path(path).read_bytes() == b"data"
    assert Path(path).name.startswith(".tmp-x.")
    assert path.endswith(".part")
    umask = os.umask(0)
    os.umask(umask)
    assert Path(path).stat().st_mode & 0o777 == 0o666 & ~umask


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_bytes(b"12345")
    (tmp_path / "link").symlink_to(regular)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert read_regular(LOCAL, str(regular), 5) == b"12345"
    with pytest.raises(OSError, match="holds more than 4 bytes"):
        read_regular(LOCAL, str(regular), 4)
    for name, what in (("link", "a symbolic link"), ("fifo", "a FIFO"), ("dir", "a directory")):
        with pytest.raises(OSError, match=f"{name} is {what}, not a regular file"):
            open_regular(LOCAL, str(tmp_path / name))


def test_remove_file_removes_files_and_links_and_names_anything_else(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert remove_file(LOCAL, str(tmp_path / "link")) is None
    assert remove_file(LOCAL, str(tmp_path / "file")) is None
    assert remove_file(LOCAL, str(tmp_path / "missing")) is None
    assert remove_file(LOCAL, str(tmp_path / "fifo")) == "a FIFO"
    assert remove_file(LOCAL, str(tmp_path / "dir")) == "a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "target"]
    assert target.read_text() == "kept"
