"""What a version of a stream's model has trained, and how fresh it was when published.

A scheduled version of a model trained on a stream records, in its ``position`` (so in both
``LATEST`` and its manifest's ``meta``), the stream partitions it has *trained through*::

    "stream": {"partitions": 7, "newest": "dt=2026-12-01/hour=06",
               "newest_committed_at": 1796108406.2}

``partitions`` leading partitions (from the reader's ``start``) had every task finished when the
exporter had flushed its own pushes, as the leading master counts them (its status document's
``stream``): a task is finished only after its trainer's pushes are all applied, so the version
holds every update of those partitions. ``newest`` is the last of them, and
``newest_committed_at`` the moment it was committed: its manifest's modification time
(:meth:`~elasticps.data.stream.FsspecPartitionSource.committed_at`).

**Freshness** is, per partition, the time from its commit to the publication of the first
version that trained through it (``LATEST`` naming that version, :mod:`.model_dir`). After each
version the exporter writes the partitions that version covered first, with their commit times
(``job/freshness/<version>``, :func:`elasticps.store.keys.publish_freshness`); the launcher sums
them into ``summary.json``'s ``freshness_s`` (:func:`freshness_summary`).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticps.data.stream import FsspecPartitionSource
from elasticps.trainer.model_dir import VersionRecord

log = logging.getLogger(__name__)

Status = Callable[[], Mapping[str, Any]]  # the master's status document
Published = Callable[[int, dict[str, Any]], None]  # (version, freshness record) -> stored


@dataclass(frozen=True)
class StreamMark:
    """The partitions a version has trained through (see the module docstring)."""

    partitions: int
    newest: str | None
    newest_committed_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "newest": self.newest,
                "newest_committed_at": self.newest_committed_at}


def trained_through(status: Mapping[str, Any]) -> tuple[int, str | None]:
    """How many leading partitions the master's status says are trained, and the last one."""
    stream = status.get("stream")
    if not isinstance(stream, Mapping):
        return 0, None
    newest = stream.get("trained_through")
    appended, waiting = stream.get("partitions"), stream.get("waiting")
    if not isinstance(newest, str) or not isinstance(appended, int) or not isinstance(
            waiting, int):
        return 0, None
    return max(0, appended - waiting), newest


def previous_newest(latest: VersionRecord | None) -> str | None:
    """The newest partition the version ``LATEST`` names had trained through (None: none, or
    not a stream's version)."""
    stream = latest.position.get("stream") if latest is not None else None
    newest = stream.get("newest") if isinstance(stream, Mapping) else None
    return newest if isinstance(newest, str) else None


class StreamVersions:
    """The stream side of a scheduled export: a version's :class:`StreamMark` (asked for after
    the exporter's flush) and, once published, its freshness record."""

    def __init__(self, prefix: str, start: str, status: Status, publish: Published) -> None:
        self.source = FsspecPartitionSource(prefix)
        self.start = start
        self.status = status
        self.publish = publish
        self._covered: dict[str, float | None] = {}  # of the version being written

    def position(self, latest: VersionRecord | None) -> dict[str, Any]:
        """What the version being written adds to its position: ``{"stream": mark}``."""
        self._covered = {}
        after = previous_newest(latest)
        try:
            count, newest = trained_through(self.status())
        except Exception as exc:  # a master failing over: claim no more than the last version
            log.warning("Cannot ask the master how far the stream is trained (%s); the version "
                        "records what the one before it did.", exc)
            return {"stream": dict(latest.position["stream"])} if after and latest else {}
        covered = [] if newest is None else [
            p for p in self.source.partitions(after)
            if self.start <= p.name <= newest]
        self._covered = {p.name: self.source.committed_at(p) for p in covered}
        committed = self._covered.get(newest) if newest is not None else None
        if newest is not None and newest == after and latest is not None:
            committed = latest.position["stream"].get("newest_committed_at")  # as it was
        return {"stream": StreamMark(count, newest, committed).as_dict()}

    def trained(self) -> int | None:
        """How many leading partitions the master says are trained through now (None while
        it cannot say)."""
        try:
            return trained_through(self.status())[0]
        except Exception as exc:  # a master failing over: the next finished task asks again
            log.debug("Cannot ask the master how far the stream is trained: %s", exc)
            return None

    def published(self, record: VersionRecord) -> None:
        """Record the partitions ``record`` was the first to train through."""
        covered, self._covered = self._covered, {}
        if not covered:
            return
        try:
            self.publish(record.version, {"version": record.version,
                                          "published_at": record.published_at,
                                          "partitions": covered})
        except Exception as exc:  # a report: the version itself is published
            log.warning("Cannot record the freshness of version %d: %s", record.version, exc)


def freshness_seconds(records: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per partition, commit to publication of the first version that trained through it."""
    seen: dict[str, float] = {}
    for record in records:
        published = record.get("published_at")
        partitions = record.get("partitions")
        if not isinstance(published, int | float) or not isinstance(partitions, Mapping):
            continue
        for name, committed in partitions.items():
            if isinstance(committed, int | float) and name not in seen:
                seen[name] = float(published) - float(committed)
    return list(seen.values())


def freshness_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """``{"median": s, "max": s}`` over :func:`freshness_seconds`; None without a figure."""
    seconds = freshness_seconds(records)
    if not seconds:
        return None
    return {"median": round(statistics.median(seconds), 3), "max": round(max(seconds), 3)}
