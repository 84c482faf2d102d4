"""Following a stream, decided purely: a listing in, the partitions to append and the new
position out (no I/O, no clock; ``stream_loop.py`` lists, reads manifests and persists).

The master keeps a :class:`StreamPosition`: how many partitions it appended, the name of the
last one and the first one's schema. Each step it is handed the committed partitions after that
name (as :class:`Candidate`: the partition and its manifest, or why it could not be read) and
whether the end marker was seen *before* the listing, and :func:`decide` says:

- which candidates to append, in name order, at most ``limit`` (one store transaction holds
  them, with the queue's meta and the new position); those before ``start`` (a backfill's
  ``--from``) are passed over, never appended;
- where the stream stops, if it does: a partition whose manifest cannot be read, whose schema
  differs from the first partition's (dense statistics aside: every partition is read with the
  first's), or that has more than :data:`MAX_PARTITION_CHUNKS` chunks, is *refused*: nothing
  from it on is appended, and the reason is shown until the partition is rewritten or removed
  (the master asks again at every poll: the stream waits, it does not fail);
- whether the stream is complete: the end marker was seen, nothing was refused and every
  candidate was taken (the caller listed after it saw the marker, so nothing can come later).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from elasticps.data.manifest import ChunkRef, Manifest
from elasticps.data.stream import (
    Partition,
    check_partition_name,
    schema_difference,
    schema_fingerprint,
)
from elasticps.errors import DataError, InvalidArgumentError

MAX_PARTITION_CHUNKS = 20_000  # one partition's record stays well under the store's 1 MiB
APPEND_LIMIT = 32  # partitions appended in one store transaction


@dataclass(frozen=True)
class StreamPosition:
    """How far the master followed the stream (persisted with the queue, fenced)."""

    partitions: int = 0  # partitions appended
    last: str | None = None  # the name of the last one appended
    schema: str | None = None  # the first partition's schema (data.stream.schema_fingerprint)


@dataclass(frozen=True)
class AppendedPartition:
    """A partition as the master appends it: chunk paths relative to the stream's prefix."""

    name: str
    time: float | None
    chunks: tuple[ChunkRef, ...]

    @property
    def rows(self) -> int:
        return sum(c.num_rows for c in self.chunks)


@dataclass(frozen=True)
class Candidate:
    """A committed partition not appended yet: its manifest, or why it could not be read."""

    partition: Partition
    manifest: Manifest | None = None
    error: str = ""


@dataclass(frozen=True)
class FollowDecision:
    take: tuple[AppendedPartition, ...] = ()
    position: StreamPosition = StreamPosition()
    refused: str = ""  # why the stream stops at its next partition ("" = it does not)
    complete: bool = False  # the end marker was seen and all of the stream is appended


def decide(position: StreamPosition, candidates: Sequence[Candidate], *, ended: bool,
           start: str = "", more: bool = False, limit: int = APPEND_LIMIT) -> FollowDecision:
    """What to append of ``candidates`` (see the module docstring). ``more``: the listing
    held more partitions than the candidates given (read at most ``limit`` manifests per
    step), so the stream is not complete yet."""
    if limit < 1:
        raise InvalidArgumentError(f"limit={limit} must be >= 1")
    taken: list[AppendedPartition] = []
    refused = ""
    for candidate in sorted(candidates, key=lambda c: c.partition.name):
        name = candidate.partition.name
        if (position.last is not None and name <= position.last) or name < start:
            continue  # appended already, or before the backfill's start
        if len(taken) == limit:
            more = True
            break
        refused = _refusal(position, candidate)
        if refused:
            break
        assert candidate.manifest is not None
        taken.append(AppendedPartition(
            name, candidate.partition.time,
            tuple(replace(c, path=f"{name}/{c.path}") for c in candidate.manifest.chunks)))
        position = StreamPosition(position.partitions + 1, name,
                                  position.schema or schema_fingerprint(candidate.manifest))
    return FollowDecision(tuple(taken), position, refused,
                          complete=ended and not refused and not more)


def _refusal(position: StreamPosition, candidate: Candidate) -> str:
    """Why ``candidate`` cannot be appended after ``position`` ("" if it can)."""
    name = candidate.partition.name
    try:
        check_partition_name(name)
    except DataError as exc:
        return f"partition {name!r:.80} cannot be trained: {exc}"
    if candidate.manifest is None:
        return f"partition {name} cannot be read: {candidate.error or 'no manifest'}"
    chunks = len(candidate.manifest.chunks)
    if chunks > MAX_PARTITION_CHUNKS:
        return (f"partition {name} has {chunks} chunks, more than {MAX_PARTITION_CHUNKS}: "
                "write it with larger chunks (--rows-per-chunk) or split it in two")
    if position.schema is None:
        return ""
    mine = schema_fingerprint(candidate.manifest)
    if mine == position.schema:
        return ""
    # The fingerprints are canonical JSON: the difference is named from them.
    first, theirs = json.loads(position.schema), json.loads(mine)
    return (f"partition {name} has another schema than the stream's first partition "
            f"({schema_difference(first, theirs)}); the stream stops here until the partition "
            "is rewritten with the first one's schema (elasticps data convert ... --like "
            "FIRST_PARTITION) or removed")
