"""``elasticps data upload``: copy a dataset directory to any fsspec URL, resumably and verified.

Layout: ``URL/<namespace>/<name>/...`` (the namespace of the job that will read it, the name
of the local directory by default), so users of one bucket or shared filesystem do not collide
and a job's ``data:`` names exactly what was uploaded.

Each file is copied to ``<file>.elasticps-partial`` (created anew, never through a link planted
there), read back and hashed, and only then moved to its name; so a file under its final name
is always complete and verified, and an interrupted upload resumes by skipping every final
file whose sha256 matches the local one. A final file
with other content is refused (another dataset is there) unless ``overwrite``. Last, a record
of every file's size and sha256 is written (``.elasticps-upload.json``): data first, then the
record that says it is whole.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import fsspec

from elasticps.errors import ConfigError, DataError
from elasticps.safe_files import create_new, open_regular, remove_file

logger = logging.getLogger(__name__)

RECORD_NAME = ".elasticps-upload.json"
PARTIAL_SUFFIX = ".elasticps-partial"
CHUNK = 4 * 2**20
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}\Z")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


@dataclass
class UploadResult:
    """What an upload did: the dataset's URL, and which files it copied or found in place."""

    url: str
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes_copied: int = 0


def dataset_url(base_url: str, namespace: str, name: str) -> str:
    """``base_url/namespace/name``: where a dataset of ``namespace`` lives under a storage URL."""
    if not _NAMESPACE.match(namespace):
        raise ConfigError(f"namespace {namespace!r} is not a DNS-1123 label")
    if not _NAME.match(name):
        raise ConfigError(f"dataset name {name!r} may hold only letters, digits, '.', '_' and "
                          "'-' (and must not start with '.' or '-')")
    return f"{base_url.rstrip('/')}/{namespace}/{name}"


def local_files(root: Path) -> list[str]:
    """Every regular file under ``root`` as a sorted relative POSIX path; partial copies and
    the upload record of an earlier upload are not data."""
    if not root.is_dir():
        raise ConfigError(f"{str(root)!r} is not a directory")
    found = []
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = Path(current) / name
            if name == RECORD_NAME or name.endswith(PARTIAL_SUFFIX) or not path.is_file():
                continue
            found.append(path.relative_to(root).as_posix())
    if not found:
        raise ConfigError(f"{str(root)!r} holds no files to upload")
    return sorted(found)


def _sha256(stream: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            yield chunk


class Destination(Protocol):
    """Where :func:`upload_to` puts a dataset: an fsspec URL here, a PersistentVolumeClaim
    through a transfer Job in :mod:`elasticps.cluster.claim_upload`. Every route keeps the
    same promises: a file under its final name was verified, a different one is refused
    unless ``overwrite``, the record comes last."""

    url: str

    def in_place(self, rel: str, sha: str, size: int, overwrite: bool) -> bool:
        """True when ``rel`` there already holds this content; DataError when it holds
        another (unless ``overwrite``)."""

    def put(self, rel: str, source: Path, sha: str, size: int) -> None:
        """Copy ``source`` to ``rel``, verified by ``sha`` before it takes the name."""

    def write_record(self, data: bytes) -> None:
        """Write the upload record (:data:`RECORD_NAME`), after every file."""


class FsspecDestination:
    """A dataset directory on any fsspec URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.fs, dest = fsspec.core.url_to_fs(url)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"cannot open {url!r}: {exc}") from exc
        self.root = dest.rstrip("/")

    def in_place(self, rel: str, sha: str, size: int, overwrite: bool) -> bool:
        return in_place(self.fs, f"{self.root}/{rel}", sha, size, f"{self.url}/{rel}",
                        overwrite)

    def put(self, rel: str, source: Path, sha: str, size: int) -> None:
        copy_verified(self.fs, file_chunks(source), f"{self.root}/{rel}", sha,
                      f"{self.url}/{rel}")

    def write_record(self, data: bytes) -> None:
        with self.fs.open(f"{self.root}/{RECORD_NAME}", "wb") as out:
            out.write(data)


def upload(local_dir: str | Path, base_url: str, *, namespace: str, name: str | None = None,
           overwrite: bool = False,
           on_file: Callable[[str, bool], None] | None = None) -> UploadResult:
    """Copy ``local_dir`` to ``base_url/namespace/name``; see the module docstring.

    ``on_file(path, copied)`` is called after each file is in place (copied or found there
    already): progress for the CLI, and where tests interrupt an upload.
    """
    root = Path(local_dir)
    local_files(root)  # a missing or empty directory is named before the URL is opened
    url = dataset_url(base_url, namespace, name or root.resolve().name)
    return upload_to(root, FsspecDestination(url), overwrite=overwrite, on_file=on_file)


def upload_to(root: Path, destination: Destination, *, overwrite: bool = False,
              on_file: Callable[[str, bool], None] | None = None) -> UploadResult:
    """Copy every file of ``root`` to ``destination`` (skipping verified ones), then the
    record of sizes and checksums."""
    result = UploadResult(destination.url)
    record: dict[str, dict[str, Any]] = {}
    for rel in local_files(root):
        with (root / rel).open("rb") as stream:
            sha, size = _sha256(stream)
        record[rel] = {"size": size, "sha256": sha}
        try:
            copied = not destination.in_place(rel, sha, size, overwrite)
            if copied:
                destination.put(rel, root / rel, sha, size)
        except OSError as exc:
            raise DataError(f"copying {rel} to {destination.url} failed: {exc}; run the upload "
                            "again to resume") from exc
        if copied:
            result.copied.append(rel)
            result.bytes_copied += size
        else:
            result.skipped.append(rel)
        if on_file is not None:
            on_file(rel, copied)
    destination.write_record(json.dumps({"files": record}, indent=1, sort_keys=True).encode())
    logger.info("Uploaded %s to %s: %d file(s) copied (%d bytes), %d already there.",
                root, destination.url, len(result.copied), result.bytes_copied,
                len(result.skipped))
    return result


def in_place(fs: Any, target: str, sha: str, size: int, where: str, overwrite: bool) -> bool:
    """True when ``target`` already holds this content; DataError when it holds another one
    (unless ``overwrite``). ``where`` names it in the error. Only a regular file is read."""
    if not fs.exists(target):
        return False
    if fs.size(target) == size:
        with open_regular(fs, target) as stream:
            if _sha256(stream)[0] == sha:
                return True
    if overwrite:
        return False
    raise DataError(f"{where} already exists with other content (its checksum differs "
                    "from the local file's); refusing to overwrite it. Upload under another "
                    "--name, or pass --overwrite to replace it")


def copy_verified(fs: Any, chunks: Iterable[bytes], target: str, sha: str, where: str) -> None:
    """Write ``chunks`` to ``<target>.elasticps-partial``, read it back, and move it to
    ``target`` only if its sha256 is ``sha``; a mismatching copy is removed and refused
    (DataError). Whatever is at the partial name first (an interrupted copy, or a link someone
    planted) is removed, never written through: the partial file is created anew
    (:func:`elasticps.safe_files.create_new`); a directory or FIFO there is an OSError."""
    partial = target + PARTIAL_SUFFIX
    parent = target.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    planted = remove_file(fs, partial)
    if planted is not None:
        raise OSError(errno.EEXIST, f"{partial} is {planted}; remove it to upload {where}")
    with create_new(fs, partial) as out:
        for chunk in chunks:
            out.write(chunk)
    with open_regular(fs, partial) as stream:
        written, _ = _sha256(stream)
    if written != sha:
        remove_file(fs, partial)
        raise DataError(f"{where}: the copy's sha256 {written} does not match the local "
                        f"file's {sha}; the copy was refused and removed. Check the storage and "
                        "run the upload again")
    fs.mv(partial, target)


__all__ = ["PARTIAL_SUFFIX", "RECORD_NAME", "Destination", "FsspecDestination", "UploadResult",
           "copy_verified", "dataset_url", "file_chunks", "in_place", "local_files", "upload",
           "upload_to"]
