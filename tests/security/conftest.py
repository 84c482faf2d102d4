"""Fixtures of the security tests: a second user of the machine, and a directory both reach."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.second_user import SecondUser, second_user, shared_dir


@pytest.fixture(scope="session")
def attacker() -> SecondUser:
    """Another user of this machine, untrusted (tests/security/second_user.py)."""
    return second_user()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory like /tmp (root's, world-writable, sticky) that both users reach."""
    path = shared_dir(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
