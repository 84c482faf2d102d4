"""The launcher's work directory (launch/workdir.py) and what the roles are told of the token:
a file, never the token itself."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.launch.launcher import LaunchOptions, build_specs
from elasticps.launch.workdir import prepare_workdir, write_token


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_no_role_is_given_the_token_only_the_file_that_holds_it(tmp_path: Path) -> None:
    specs = build_specs(LaunchOptions(script="train.py", trainers=2), tmp_path, "file:///x.db",
                        "job", {"PADDLE_JOB_TOKEN": "from-the-shell"})
    assert {s.role for s in specs} == {"master", "pserver", "trainer"}
    for spec in specs:
        assert "PADDLE_JOB_TOKEN" not in spec.env
        assert spec.env["PADDLE_JOB_TOKEN_FILE"] == str(tmp_path / "token")
    path = write_token(tmp_path, "abc")
    assert (path.read_text(), mode(path)) == ("abc\n", 0o600)


def test_a_new_workdir_and_the_directories_above_it_are_made_0700(tmp_path: Path) -> None:
    workdir = tmp_path / "a" / "b" / "work"
    old = os.umask(0)
    try:
        prepare_workdir(workdir)
    finally:
        os.umask(old)
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", workdir)] == [0o700] * 3


def test_an_existing_workdir_is_kept_as_it_is_unless_others_can_write_it(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o755)
    workdir.chmod(0o755)
    prepare_workdir(workdir)  # readable by others, but theirs to change: no
    assert mode(workdir) == 0o755
    workdir.chmod(0o775)
    with pytest.raises(ConfigError, match=r"the workdir '.*work' \(owner .*, mode 0775\) can be "
                                          r"written by other users.*chmod go-w"):
        prepare_workdir(workdir)
    workdir.chmod(0o755)
    (workdir / "tls").mkdir(mode=0o777)
    (workdir / "tls").chmod(0o777)
    with pytest.raises(ConfigError, match=r"tls in the workdir '.*tls' .*mode 0777"):
        prepare_workdir(workdir)


def test_the_directory_above_must_be_closed_to_others_or_sticky(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(ConfigError, match=r"lies in '.*shared' .*mode 0777\), which other users "
                                          r"can write without the sticky bit"):
        prepare_workdir(parent / "work")
    assert not (parent / "work").exists()
    parent.chmod(0o1777)  # like /tmp
    prepare_workdir(parent / "work")
    assert mode(parent / "work") == 0o700
