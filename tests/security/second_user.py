"""A second, untrusted user of the same machine, for the tests of what one can do to another's
job. Made with ``useradd`` (once: the account stays for later runs); the tests must run as root,
which both creates the account and becomes it in a child (``subprocess`` ``user=``)."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

NAME = "elasticps-attacker"
LOCK = "/tmp/elasticps-attacker.lock"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class SecondUser:
    name: str
    uid: int
    gid: int
    python: str

    def run(self, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``python3 -c code args...`` (the system's: our interpreter may lie in root's home)
        as this user, with nothing of ours in its environment."""
        return subprocess.run(
            [self.python, "-I", "-c", code, *args], user=self.uid, group=self.gid,
            extra_groups=[], env={"PATH": SYSTEM_PATH, "HOME": "/"}, cwd="/",
            capture_output=True, text=True, timeout=timeout, check=False)

    def readable(self, paths: list[Path]) -> list[str]:
        """Which of ``paths`` this user can open and read a byte of, or list (directories)."""
        done = self.run(_PROBE, json.dumps([str(p) for p in paths]))
        assert done.returncode == 0, done.stderr
        found: list[str] = json.loads(done.stdout)
        return found


# Run as the second user: try every path, report the ones that gave something away.
_PROBE = """
import json, os, sys
opened = []
for path in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
        opened.append(path)
    except OSError:
        pass
print(json.dumps(opened))
"""


def second_user() -> SecondUser:
    """The account (created if missing); skips the test where that is impossible."""
    if os.geteuid() != 0:
        pytest.skip("the second-user tests need root (to create a user and become it)")
    python = shutil.which("python3", path=SYSTEM_PATH)
    if shutil.which("useradd") is None or python is None:
        pytest.skip("useradd, or a system python3 for the second user, is not installed")
    # Test processes side by side (pytest-xdist) take turns: one adds it, the others find it.
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entry = pwd.getpwnam(NAME)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                            "--shell", "/usr/sbin/nologin", NAME], check=True,
                           capture_output=True)
            entry = pwd.getpwnam(NAME)
    return SecondUser(NAME, entry.pw_uid, entry.pw_gid, python)


def shared_dir(mode: int) -> Path:
    """A fresh directory under /tmp that both users reach, with ``mode`` (``0o1777``: /tmp's
    own), owned by root. The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix="eps-shared-", dir="/tmp"))
    path.chmod(mode)
    return path
