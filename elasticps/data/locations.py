"""Where a dataset's files may be: chunk paths inside the dataset, URL schemes a job allows.

A dataset manifest is data, possibly written by someone else, and its chunk paths are handed
to the master and to every trainer. So a chunk path (and a split's directory) must be a
relative path inside the dataset directory: no absolute path, no URL, no ``..``, no backslash;
:func:`resolve` joins it to the dataset's URL and nothing else. A dataset URL itself, as a
trainer's ``SetDataset`` names it to the master, must use a scheme the job allows
(``PADDLE_DATA_SCHEMES``, default ``file``): a master does not fetch ``http://`` URLs it was
sent unless the job says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from elasticps.errors import DataError

MAX_PATH = 1024
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+-]*\Z")


def check_relative(path: object, where: str) -> str:
    """``path`` if it is a relative path inside a dataset directory, else DataError."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH:
        raise DataError(f"{where}: {path!r:.80} is not a path of at most {MAX_PATH} characters")
    parts = path.split("/")
    if not all(_PART.match(part) for part in parts):
        raise DataError(f"{where}: {path!r:.80} is not a relative path inside the dataset "
                        "(letters, digits, '.', '_', '-', '=', '+' and '/' only; no leading "
                        "'/' or '.', no URL, no '..')")
    return path


def resolve(dataset_url: str, path: str) -> str:
    """The URL of ``path`` (checked by :func:`check_relative`) inside the dataset."""
    check_relative(path, f"dataset {dataset_url}")
    return dataset_url.rstrip("/") + "/" + path


def schemes_of(url: str) -> list[str]:
    """The URL schemes ``url`` uses (fsspec chains like ``simplecache::s3://b/k`` use two);
    a plain path is ``file``."""
    *chain, last = url.split("::")
    outer = [part.split("://", 1)[0].lower() for part in chain]  # bare protocol names
    return [*outer, last.split("://", 1)[0].lower() if "://" in last else "file"]


def check_scheme(url: str, allowed: Iterable[str]) -> str:
    """``url`` if every scheme it uses is allowed, else DataError naming the setting."""
    allowed = tuple(allowed)
    refused = [s for s in schemes_of(url) if s not in allowed]
    if refused:
        raise DataError(f"dataset URL {url!r:.200} uses {', '.join(refused)}, which this job "
                        f"does not allow (PADDLE_DATA_SCHEMES={','.join(allowed)})")
    return url
