"""``elasticps run``'s work directory: checked before any role starts, made private.

WORKDIR holds what the job trusts: the store (``store.db``), the TLS identities (``tls/``), the
job token (``token``), the logs and the checkpoints. Another user who could write there could
swap the CA, point ``master/address`` at a server of theirs and be sent the token, or read
everything the job writes. So the launcher refuses a WORKDIR, or any of those entries in it,
that another user owns or can write, and one that lies in a directory another user could
change (:mod:`elasticps.private_files`; ``/tmp`` is fine: it is sticky). A WORKDIR that does not
exist is created 0700 (``--workdir /tmp/ctr`` on a fresh machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from elasticps.launch.scale import JOB_FILE
from elasticps.private_files import check_owned, check_parents, make_private_dir, replace_private

TOKEN_FILE = "token"
# What the launcher and its roles read back and trust, relative to WORKDIR.
TRUSTED_FILES = ("store.db", "store.db-wal", "store.db-shm", TOKEN_FILE, JOB_FILE)
# Directories whose whole contents (small: certificates, logs, checkpoints) must be the user's.
TRUSTED_TREES = ("tls", "logs", "checkpoints")


def prepare_workdir(workdir: Path) -> Path:
    """Check ``workdir`` (module docstring) and create it 0700 if it is missing; raises
    :class:`~elasticps.errors.ConfigError` naming the first path that fails, and its owner."""
    check_parents(workdir, "the workdir")
    check_owned(workdir, "the workdir")
    if workdir.exists():
        for path in _trusted_entries(workdir):
            check_owned(path, f"{path.relative_to(workdir)} in the workdir")
        return workdir
    make_private_dir(workdir)
    # Again: another user may have made a missing directory between the check and mkdir.
    check_parents(workdir, "the workdir")
    check_owned(workdir, "the workdir")
    return workdir


def _trusted_entries(workdir: Path) -> Iterator[Path]:
    for name in TRUSTED_FILES:
        yield workdir / name
    for name in TRUSTED_TREES:
        top = workdir / name
        yield top
        if top.is_dir() and not top.is_symlink():
            yield from sorted(top.rglob("*"))


def write_token(workdir: Path, token: str) -> Path:
    """``WORKDIR/token`` (0600): how the job's processes get the token (PADDLE_JOB_TOKEN_FILE),
    so it is in no process's environment for the user's script to hand on."""
    path = workdir / TOKEN_FILE
    replace_private(path, token.encode() + b"\n")
    return path
