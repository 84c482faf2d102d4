"""Small helpers shared by tests: polling with a deadline (never sleep to synchronise), and
each test job's TLS identities and credentials."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from elasticps.rpc.credentials import JobCredentials
from elasticps.rpc.tls import TlsIdentity, write_job_identities

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]  # the repository root


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition", *,
             interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def kill_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


TOKEN = "test-token"
# One directory of test identities shared with the test's child processes (they inherit the
# variable), so a master started by a test and the test's own clients trust the same CA.
_TLS_ROOT_VAR = "ELASTICPS_TEST_TLS_ROOT"
if _TLS_ROOT_VAR not in os.environ:
    os.environ[_TLS_ROOT_VAR] = tempfile.mkdtemp(prefix="elasticps-test-tls-")
    atexit.register(shutil.rmtree, os.environ[_TLS_ROOT_VAR], True)


def job_tls(job: str) -> dict[str, Path]:
    """The TLS identity directories (one per role) of test job ``job``: made by the first
    process that asks (written aside, then renamed into place), read by every other."""
    root = Path(os.environ[_TLS_ROOT_VAR]) / job
    if not root.exists():
        staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{job}-"))
        write_job_identities(staging, job)
        try:
            staging.rename(root)
        except OSError:  # another process made it first: use theirs
            shutil.rmtree(staging, ignore_errors=True)
    return {role: root / role for role in ("master", "pserver", "trainer")}


def tls_env(job: str, role: str) -> dict[str, str]:
    """The environment that gives a role process of ``job`` its TLS identity."""
    return {"PADDLE_TLS_DIR": str(job_tls(job)[role])}


def job_credentials(job: str, role: str = "trainer", token: str = TOKEN) -> JobCredentials:
    """Credentials of a ``role`` process of test job ``job`` (mutual TLS + the token)."""
    return JobCredentials(job, token, TlsIdentity.load(job_tls(job)[role]))
