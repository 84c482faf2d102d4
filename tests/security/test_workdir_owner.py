"""Another user of the machine cannot take a job over through its work directory.

The attack this stops: a second user creates ``/tmp/ctr`` (world-writable) before the victim
runs ``elasticps run --workdir /tmp/ctr``, then swaps ``tls/`` for a CA of their own, points
``master/address`` and ``pserver/slot/0`` at a server of theirs and is sent the job token. So
``elasticps run`` refuses, before it writes or starts anything, a workdir (or what the job
keeps in it) that another user owns or can write, or that lies in a directory another user can
write without the sticky bit; and it makes a fresh workdir 0700, also in a /tmp-like directory.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.security.second_user import SecondUser, shared_dir

SCRIPT = REPO / "tests/security/scripts/done_trainer.py"


def _run(workdir: Path, *, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "elasticps", "run", "--workdir", str(workdir), "--job-name",
         "owner", "--standby-masters", "0", "--grace", "5", str(SCRIPT)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120, check=False, umask=umask)


def _assert_refused_before_start(done: subprocess.CompletedProcess[str], workdir: Path,
                                 *named: str) -> None:
    assert done.returncode == 1, done.stderr[-3000:]
    for text in named:
        assert text in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    if workdir.exists():  # nothing of the job was written, so no role was started
        made = {p for p in workdir.rglob("*") if p.is_file() and p.stat().st_size > 0}
        assert made == set(), made


def test_a_workdir_another_user_made_first_is_refused(attacker: SecondUser,
                                                      shared: Path) -> None:
    workdir = shared / "ctr"
    made = attacker.run("import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777); "
                        "open(os.path.join(sys.argv[1], 'store.db'), 'w').close()", str(workdir))
    assert made.returncode == 0, made.stderr
    done = _run(workdir)
    _assert_refused_before_start(done, workdir, f"the workdir '{workdir}'",
                                 f"owner {attacker.name} (uid {attacker.uid})",
                                 "belongs to another user")
    assert (workdir / "store.db").stat().st_size == 0  # the planted store was not opened


def test_a_workdir_other_users_can_write_is_refused(shared: Path) -> None:
    workdir = shared / "ctr"
    workdir.mkdir()
    workdir.chmod(0o777)  # e.g. made by hand under `umask 0`
    done = _run(workdir)
    _assert_refused_before_start(done, workdir, f"the workdir '{workdir}'", "mode 0777",
                                 "can be written by other users", f"chmod go-w {workdir}")


@pytest.mark.parametrize("entry", ["store.db", "tls", "tls/trainer/tls.key", "token",
                                   "logs/master.log", "checkpoints"])
def test_what_the_job_keeps_in_the_workdir_must_be_the_users_own(
        attacker: SecondUser, tmp_path: Path, entry: str) -> None:
    """A workdir of the user's own that once was open holds an entry the other user made."""
    workdir = tmp_path / "ctr"
    planted = workdir / entry
    planted.parent.mkdir(parents=True, mode=0o700)
    if "." in entry:
        planted.write_bytes(b"")
    else:
        planted.mkdir(mode=0o700)
    os.chown(planted, attacker.uid, attacker.gid)
    done = _run(workdir)
    _assert_refused_before_start(done, workdir, f"'{planted}'",
                                 f"owner {attacker.name} (uid {attacker.uid})")


def test_a_workdir_in_a_directory_others_can_write_without_the_sticky_bit_is_refused() -> None:
    open_dir = shared_dir(0o777)  # anyone may rename or replace what is in it
    try:
        workdir = open_dir / "ctr"
        done = _run(workdir)
        _assert_refused_before_start(done, workdir, f"'{workdir}' lies in '{open_dir}'",
                                     "without the sticky bit")
        assert not workdir.exists()
    finally:
        open_dir.chmod(0o700)
        for path in sorted(open_dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        open_dir.rmdir()


def test_a_fresh_workdir_in_a_sticky_shared_directory_is_made_0700_and_the_job_runs(
        shared: Path) -> None:
    """The README's `--workdir /tmp/ctr`: /tmp is world-writable with the sticky bit."""
    workdir = shared / "ctr"
    done = _run(workdir, umask=0)  # the widest umask: modes must not come from it
    assert done.returncode == 0, done.stderr[-3000:]
    info = workdir.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (os.geteuid(), 0o700)
    again = _run(workdir)  # a rerun in the same, now existing, workdir
    assert again.returncode == 0, again.stderr[-3000:]
