"""A stream: a prefix under which datasets (partitions) land over time, in name order.

A stream is any fsspec URL (a local directory, ``s3://bucket/clicks``...). Under it,
*partitions* appear: each one a dataset directory written by ``elasticps data convert`` or
``write_dataset`` (for example ``dt=2026-12-01/hour=13/``). A dataset's manifest is written last,
so **a partition is committed when its manifest exists**; one without a manifest is not there
yet. Partitions are taken in the lexicographic order of their names (their paths relative to the
prefix), so names must sort in time order: zero-padded hive keys (``dt=YYYY-MM-DD/hour=HH``) do.
A directory inside a partition is part of it (a ``test/`` split), never a partition of its own;
names whose parts start with ``_`` or ``.`` are hidden (a writer's temporary directory).

A stream ends when the marker ``_END`` exists under the prefix
(``elasticps data stream-end PREFIX`` writes it); until then more partitions may come.

**Partition time.** A partition's time (unix seconds, UTC) is read from its name's hive keys:
``dt=`` (or ``date=``, ``day=``) as ``YYYY-MM-DD`` or ``YYYYMMDD``, then ``hour=`` and
``minute=``; a name without a date key has no time. Training on a stream runs the sparse
tables' expiry and show/click decay on this time (docs/pserver.md), so a backfill of last week
behaves as last week did.

**The partition source** (:class:`PartitionSource`) is the interface a master follows a stream
through: the committed partitions after a position, and whether the end marker is there.
:class:`FsspecPartitionSource` implements it over a listing (fsspec has no watch, so the
master polls); a message-queue source (Kafka offsets closed into partitions) would implement the
same three methods. Pure functions here decide nothing about the job: the master's follow logic
(``elasticps/master/stream_follow.py``) does.
"""

from __future__ import annotations

import calendar
import datetime
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import fsspec

from elasticps.data.locations import check_relative
from elasticps.data.manifest import MANIFEST_NAME, Manifest, read_manifest
from elasticps.errors import DataError

END_MARKER = "_END"
MAX_PARTITION_NAME = 512
_DATE_KEYS = ("dt", "date", "day")
_DATE = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})\Z")
_NUMBER = re.compile(r"^\d{1,2}\Z")


@dataclass(frozen=True)
class Partition:
    """A committed partition: its ``name`` (its path under the stream's prefix, no slashes at
    either end) and its time (unix seconds, UTC), None where the name has no date key."""

    name: str
    time: float | None = None


def partition_time(name: str) -> float | None:
    """The time a partition name's hive keys say (``dt=2026-12-01/hour=13`` -> that hour,
    UTC), None without a date key; a date key, hour or minute that is malformed or out of
    range is a DataError naming it."""
    keys: dict[str, str] = {}
    for part in name.split("/"):
        key, sep, value = part.partition("=")
        if sep:
            keys.setdefault(key.lower(), value)
    date_key = next((k for k in _DATE_KEYS if k in keys), None)
    if date_key is None:
        return None
    match = _DATE.match(keys[date_key])
    if match is None:
        raise DataError(f"partition {name!r}: {date_key}={keys[date_key]!r} is not a date "
                        "(YYYY-MM-DD or YYYYMMDD)")
    year, month, day = (int(g) for g in match.groups())
    hour = _clock_field(name, keys, "hour", 23)
    minute = _clock_field(name, keys, "minute", 59)
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise DataError(f"partition {name!r}: {date_key}={keys[date_key]!r} is not a day of "
                        "the calendar")
    return float(calendar.timegm((year, month, day, hour, minute, 0)))


def _clock_field(name: str, keys: dict[str, str], key: str, top: int) -> int:
    text = keys.get(key)
    if text is None:
        return 0
    if not _NUMBER.match(text) or int(text) > top:
        raise DataError(f"partition {name!r}: {key}={text!r} must be a number from 0 to {top}")
    return int(text)


def check_partition_name(name: str) -> str:
    """``name`` if it can name a partition (a relative path a chunk path may start with)."""
    if len(name) > MAX_PARTITION_NAME:
        raise DataError(f"partition name {name[:80]!r}... is longer than {MAX_PARTITION_NAME} "
                        "characters")
    return check_relative(name, "partition name")


class PartitionSource(Protocol):
    """Where a stream's partitions come from. ``url`` is the stream's prefix; a chunk of
    partition ``p`` is read at ``url/p.name/<chunk path>``."""

    url: str

    def partitions(self, after: str | None) -> Sequence[Partition]:
        """The committed partitions whose names sort after ``after`` (all of them for None),
        in name order. A committed partition never disappears from later answers."""
        ...

    def ended(self) -> bool:
        """Whether the stream's end marker is there: no partition after those committed now
        will come (a caller lists once more after seeing it)."""
        ...

    def manifest(self, partition: Partition) -> Manifest:
        """The manifest of a committed partition."""
        ...


class FsspecPartitionSource:
    """The partitions under an fsspec URL, found by listing it (every call lists afresh)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") or url
        self._fs, self._root = fsspec.core.url_to_fs(self.url)
        self._root = self._root.rstrip("/")

    def partitions(self, after: str | None) -> list[Partition]:
        self._fs.invalidate_cache(self._root)  # a listing cached by fsspec would hide new ones
        try:
            found = self._fs.find(self._root)
        except FileNotFoundError:
            return []  # the prefix itself is not there yet: nothing has landed
        names = sorted(_committed(self._root, [str(path) for path in found]))
        return [Partition(name, partition_time(name)) for name in _outermost(names)
                if after is None or name > after]

    def ended(self) -> bool:
        return bool(self._fs.exists(f"{self._root}/{END_MARKER}"))

    def manifest(self, partition: Partition) -> Manifest:
        return read_manifest(f"{self.url}/{partition.name}")

    def committed_at(self, partition: Partition) -> float | None:
        """When ``partition`` was committed: its manifest's modification time (unix seconds),
        None where the storage does not say."""
        try:
            modified = self._fs.modified(f"{self._root}/{partition.name}/{MANIFEST_NAME}")
        except (NotImplementedError, OSError, ValueError):
            return None
        if modified.tzinfo is None:  # fsspec's local files answer naive UTC
            modified = modified.replace(tzinfo=datetime.UTC)
        return modified.timestamp()


def _committed(root: str, paths: Sequence[str]) -> list[str]:
    """Partition names from file paths under ``root``: the directories holding a manifest,
    hidden ones (a part starting with ``_`` or ``.``) left out."""
    names = []
    prefix = root + "/"
    for path in paths:
        if not path.startswith(prefix) or not path.endswith("/" + MANIFEST_NAME):
            continue
        name = path[len(prefix):-len(MANIFEST_NAME) - 1]
        if name and not any(part[:1] in ("_", ".") for part in name.split("/")):
            names.append(name)
    return names


def _outermost(names: Sequence[str]) -> list[str]:
    """``names`` (sorted) without those inside another (a partition's own splits)."""
    kept: list[str] = []
    for name in names:
        if not any(name.startswith(outer + "/") for outer in kept[-1:]):
            kept.append(name)
    return kept


def schema_shape(manifest: Manifest) -> dict[str, Any]:
    """What every partition of a stream must share with its first: the declared schema
    without the dense statistics each conversion measured (the stream reads every partition
    with its first partition's, so its inputs are normalised alike), and the format."""
    doc = manifest.schema.to_dict()
    columns = doc.get("columns")
    if isinstance(columns, dict):
        doc["columns"] = {name: {k: v for k, v in column.items() if k != "stats"}
                          if isinstance(column, dict) else column
                          for name, column in columns.items()}
    return {"format": manifest.format, "schema": doc}


def schema_fingerprint(manifest: Manifest) -> str:
    """:func:`schema_shape` as one canonical string (what the master persists and compares)."""
    return json.dumps(schema_shape(manifest), sort_keys=True, separators=(",", ":"))


def schema_difference(first: dict[str, Any], other: dict[str, Any]) -> str:
    """A short description of where two :func:`schema_shape` documents differ."""
    if first.get("format") != other.get("format"):
        return f"format {other.get('format')!r}, not {first.get('format')!r}"
    mine, theirs = first.get("schema") or {}, other.get("schema") or {}
    for key in sorted(set(mine) | set(theirs)):
        if key == "columns":
            continue
        if mine.get(key) != theirs.get(key):
            return f"{key} {theirs.get(key)!r:.120}, not {mine.get(key)!r:.120}"
    cols, other_cols = mine.get("columns") or {}, theirs.get("columns") or {}
    if list(cols) != list(other_cols):
        return f"columns {list(other_cols)!r:.200}, not {list(cols)!r:.200}"
    for name in cols:
        if cols[name] != other_cols[name]:
            return f"column {name!r} {other_cols[name]!r:.120}, not {cols[name]!r:.120}"
    return "the same schema"


def write_end_marker(url: str) -> str:
    """Write ``url/_END`` (the stream is over); the marker's URL. Writing it again keeps the
    first one: the stream ended then."""
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    marker = f"{root}/{END_MARKER}"
    if fs.exists(marker):
        return marker
    fs.makedirs(root, exist_ok=True)
    with fs.open(marker, "wb") as out:
        out.write(json.dumps({"ended_at": time.time()}).encode() + b"\n")
    return marker
