"""Files in directories that others may write: a checkpoint directory, a dataset claim.

Whoever can write such a directory can plant an entry where elasticps will look: a symbolic
link at the name of a file about to be written (the write would go wherever it points), a
directory or a FIFO where a file is expected (removing it raises, opening a FIFO blocks until
someone writes to it). On a local file system these helpers therefore

* create files with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (an existing entry of that name is an
  error, never written through), temporary ones under an unpredictable name, with the mode a
  plain ``open`` would give (0666 less the umask) unless the caller asks for less (0600 for a
  checkpoint: :mod:`elasticps.private_files`);
* open for reading only regular files, not through a final symbolic link, with ``O_NONBLOCK``
  so that a FIFO is refused by ``fstat`` instead of blocking the open; reads are bounded;
* remove only regular files and symbolic links (the link, never its target), and say what
  anything else is so the caller can skip it with a warning.

On any other fsspec file system (object stores have no links or FIFOs) they are the plain
fsspec calls, with the same unpredictable temporary names. Every refusal is an ``OSError``
whose message names the path and what is there, so existing ``except OSError`` handling reports
it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from typing import Any, BinaryIO

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def is_local(fs: Any) -> bool:
    protocol = fs.protocol
    return "file" in (tuple(protocol) if isinstance(protocol, list | tuple) else (protocol,))


def kind_of(mode: int) -> str:
    """What an entry of this ``st_mode`` is, in words ("a regular file", "a FIFO", ...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: str, what: str) -> OSError:
    return OSError(errno.EINVAL, f"{path} is {what}, not a regular file; it is not opened")


def open_regular(fs: Any, path: str) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (locally: not through a
    final symbolic link, and a FIFO is refused without waiting for a writer)."""
    if not is_local(fs):
        handle: BinaryIO = fs.open(path, "rb")
        return handle
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise _refuse(path, "a symbolic link") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, kind_of(mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(fs: Any, path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, or an OSError if it holds more than ``limit``
    (never more than ``limit + 1`` bytes are read)."""
    with open_regular(fs, path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"{path} holds more than {limit:,} bytes; it is not read")
    return data


def create_new(fs: Any, path: str, mode: int = 0o666) -> BinaryIO:
    """``path`` created and opened for binary writing; locally only if nothing is there (a
    FileExistsError otherwise: a planted link is never written through), with ``mode`` less
    the umask (0o600: the owner's alone)."""
    if not is_local(fs):
        handle: BinaryIO = fs.open(path, "wb")
        return handle
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    return os.fdopen(fd, "wb")


def create_temp(fs: Any, directory: str, prefix: str, suffix: str = "", *,
                mode: int = 0o666) -> tuple[BinaryIO, str]:
    """A new file ``directory/<prefix><random><suffix>`` opened for binary writing, and its
    path: an unpredictable name, created as :func:`create_new` creates."""
    for _ in range(16):  # 64 random bits: a clash means someone is planting names
        path = f"{directory.rstrip('/')}/{prefix}{secrets.token_hex(8)}{suffix}"
        try:
            return create_new(fs, path, mode), path
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"{directory} already holds every temporary name tried for "
                  f"{prefix}*{suffix}")


def remove_file(fs: Any, path: str) -> str | None:
    """Remove ``path`` if it is a file (locally: a regular file, or a symbolic link itself).
    Returns None when it was removed or was not there, else what it is ("a directory", "a
    FIFO"), left in place for the caller to report."""
    if not is_local(fs):
        if fs.exists(path):
            fs.rm(path)
        return None
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        return kind_of(mode)
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile: what was asked
        os.unlink(path)
    return None


__all__ = ["create_new", "create_temp", "is_local", "kind_of", "open_regular", "read_regular",
           "remove_file"]
