"""Files only their owner can read, and places only their owner can change.

Another user of the same machine is not trusted (docs/security.md). Two rules follow:

- **what elasticps writes is its owner's alone**: files 0600, directories 0700, whatever the
  umask (the mode is given at creation, and set again, since a umask can only take bits away
  and an existing file keeps its mode). A directory is made private before anything goes in,
  so no other user can open a file in it while it is still being written.
- **what elasticps trusts must be its owner's**: a path it reads secrets or coordinates from
  must belong to the user running it (or root, who owns the machine anyway) and be writable by
  nobody else: no group or world write bit, and no directory above it that another user can
  write, since whoever can write a directory can replace what is in it. A directory above
  that is world-writable with the sticky bit (``/tmp``) is fine: there only an entry's owner
  may rename or delete it.

Every refusal is a :class:`~elasticps.errors.ConfigError` naming the path, its owner and its
mode, and what to do.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError

FILE_MODE = 0o600
DIR_MODE = 0o700
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def owner_name(uid: int) -> str:
    """``alice (uid 1001)``, or ``uid 1001`` for a uid with no account."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _describe(path: Path, info: os.stat_result) -> str:
    return (f"{str(path)!r} (owner {owner_name(info.st_uid)}, mode "
            f"{stat.S_IMODE(info.st_mode):04o})")


def check_owned(path: Path, what: str, *, sticky_ok: bool = False) -> None:
    """Refuse ``path`` unless it belongs to this user (or root) and no other user can write it.

    ``what`` names it in the message ("the workdir", "the TLS directory"). ``sticky_ok``: a
    directory writable by others with the sticky bit passes (a mounted Secret, ``/tmp``).
    A missing path passes: the caller creates it. A symbolic link is judged by the link and by
    what it points to.
    """
    try:
        link = path.lstat()
    except FileNotFoundError:
        return
    infos = [link]
    if stat.S_ISLNK(link.st_mode):
        try:
            infos.append(path.stat())
        except FileNotFoundError:
            raise ConfigError(f"{what} {str(path)!r} is a dangling symbolic link; remove it") \
                from None
    for info in infos:
        if not _trusted_owner(info.st_uid):
            raise ConfigError(
                f"{what} {_describe(path, info)} belongs to another user, who could read or "
                f"replace what elasticps keeps there; use a path of your own (remove it, or "
                f"choose another)")
        if stat.S_ISLNK(info.st_mode):
            continue  # a link's own mode means nothing; its target is checked next
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_mode & _OTHERS_WRITE and not (sticky_ok and sticky_dir):
            raise ConfigError(
                f"{what} {_describe(path, info)} can be written by other users, who could "
                f"replace what elasticps keeps there; run `chmod go-w {path}` or choose "
                "another path")


def check_parents(path: Path, what: str) -> None:
    """Refuse ``path`` if a directory above it can be changed by another user: one owned by
    someone else (not root), or writable by group or others without the sticky bit."""
    for parent in path.resolve().parents:
        try:
            info = parent.stat()
        except FileNotFoundError:
            continue  # to be made (0700) by whoever checks
        if not _trusted_owner(info.st_uid):
            raise ConfigError(
                f"{what} {str(path)!r} lies in {_describe(parent, info)}, which belongs to "
                "another user, who could replace it; choose a path in a directory of your own")
        if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
            raise ConfigError(
                f"{what} {str(path)!r} lies in {_describe(parent, info)}, which other users "
                f"can write without the sticky bit, so they could replace it; run "
                f"`chmod go-w {parent}` (or `chmod +t`), or choose another path")


def make_private_dir(path: Path, *, narrow: bool = True, what: str = "the directory") -> Path:
    """``path`` as a directory of its owner's alone (0700): missing directories on the way are
    created 0700, and (``narrow``) ``path`` itself is narrowed to 0700 when it belongs to this
    user, and refused (naming ``what``) when another user owns it: that user could delete,
    swap or plant what elasticps keeps there. Root's directories pass (a volume's mount point
    on a cluster belongs to root)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        # One made by another process meanwhile is taken as it is, like any existing one.
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=DIR_MODE)
    if narrow:
        info = path.stat()
        if not _trusted_owner(info.st_uid):
            raise ConfigError(
                f"{what} {_describe(path, info)} belongs to another user, who could delete or "
                "replace what elasticps keeps there; use a directory of your own")
        if info.st_uid == os.geteuid():
            path.chmod(DIR_MODE)
    return path


def open_private(path: Path, flags: int) -> int:
    """A file descriptor of ``path`` opened with ``flags`` (``os.O_CREAT`` is added), created
    0600 and narrowed to 0600 if it existed wider."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (0600), never wider."""
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
        handle.write(data)


def replace_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (0600) through a fresh temporary file and a rename, so a
    reader sees the old content or the new, and no file that was there is written into."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(fd, FILE_MODE)
        handle.write(data)
    os.replace(tmp, path)


def private_handle(handle: Any) -> None:
    """Narrow an open local file (a builtin or fsspec local file) to 0600."""
    os.fchmod(handle.fileno(), FILE_MODE)
