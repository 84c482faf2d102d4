"""The user's code on a storage URL (``code_url`` in a job spec), for code past a ConfigMap.

``submit`` puts the same deterministic archive :mod:`elasticps.cluster.code_archive` makes at
``code_url/<sha256>.tar.gz``. The name is the content, so an upload is skipped when a verified
copy is already there, and two versions never share a name. The copy goes through
:func:`elasticps.data.upload.copy_verified` (a temporary name, read back, checked by hash, then
moved to its name), the same path datasets take. The trainers' init container runs
``elasticps code fetch URL --sha256 H --into /workspace/code``: it streams the object to a
temporary file, refuses it past the limit or with another hash, and unpacks it where the
ConfigMap route does. The limit is the spec's ``code_limit`` (:data:`DEFAULT_CODE_LIMIT`), on
the archive and on what it unpacks to.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import fsspec

from elasticps.cluster.code_archive import (
    CONFIG_MAP_LIMITS,
    DEFAULT_CODE_LIMIT,
    READ_BLOCK,
    CodeArchive,
    CodeLimits,
    check_hash,
    extract_verified,
)
from elasticps.cluster.quantity import format_memory, parse_memory
from elasticps.cluster.spec import Job
from elasticps.data.upload import copy_verified, in_place
from elasticps.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

def code_limits(job: Job) -> CodeLimits:
    """The ConfigMap's limits, or ``code_limit`` (default 256Mi) with ``code_url``."""
    if job.code_url is None:
        return CONFIG_MAP_LIMITS
    text = str(job.code_limit) if job.code_limit is not None \
        else format_memory(DEFAULT_CODE_LIMIT)
    limit = parse_memory(text)
    return CodeLimits(limit, limit, f"code_limit={text} ({limit:,} bytes)",
                      "raise 'code_limit' in the job spec (at most 8Gi), move data out of the "
                      "directory, or bake the code into an image")


def archive_url(base_url: str, sha256: str) -> str:
    """Where the archive with this hash lives under ``code_url``."""
    return f"{base_url.rstrip('/')}/{sha256}.tar.gz"


@dataclass(frozen=True)
class PublishedCode:
    """The archive's URL, and whether this call uploaded it (False: a verified copy was there)."""

    url: str
    uploaded: bool


def publish_code(archive: CodeArchive, base_url: str) -> PublishedCode:
    """Put ``archive`` at :func:`archive_url` unless a copy with its hash is there already."""
    url = archive_url(base_url, archive.sha256)
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:
        raise ConfigError(f"job spec field 'code_url': cannot open {url!r}: {exc}") from exc
    try:
        # overwrite: an object under this hash name with other bytes is damaged; replace it
        if in_place(fs, path, archive.sha256, len(archive.data), url, overwrite=True):
            logger.info("The code archive %s is already at %s (verified); not uploaded again.",
                        archive.sha256, url)
            return PublishedCode(url, False)
        copy_verified(fs, [archive.data], path, archive.sha256, url)
    except OSError as exc:
        raise DataError(f"uploading the code archive to {url} failed: {exc}") from exc
    logger.info("Uploaded the code archive (%d bytes) to %s.", len(archive.data), url)
    return PublishedCode(url, True)


def fetch_code(url: str, expected_sha256: str, destination: str | Path,
               limits: CodeLimits) -> int:
    """What the init container runs: fetch ``url``, check its size and hash, unpack it into
    ``destination``. Returns the number of files written; nothing is written on a refusal."""
    dest = Path(destination)
    dest.mkdir(parents=True, exist_ok=True)
    # The temporary copy lives in the destination's volume (the pod's emptyDir, sized for an
    # archive and its contents): the image's own directories may not be writable.
    with tempfile.TemporaryDirectory(dir=dest, prefix=".elasticps-fetch-") as scratch:
        local = Path(scratch) / "code.tar.gz"
        digest = hashlib.sha256()
        size = 0
        try:
            with fsspec.open(url, "rb") as source, local.open("wb") as out:
                while block := source.read(READ_BLOCK):
                    size += len(block)
                    if size > limits.archive_bytes:
                        raise ConfigError(f"code archive {url} is more than {limits.name}")
                    digest.update(block)
                    out.write(block)
        except ConfigError:
            raise  # past the limit: already says so
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigError(f"cannot fetch the code archive {url}: {exc}") from exc
        check_hash(url, digest.hexdigest(), expected_sha256)
        return extract_verified(local, dest, limits)


__all__ = ["PublishedCode", "archive_url", "code_limits", "fetch_code",
           "publish_code"]
