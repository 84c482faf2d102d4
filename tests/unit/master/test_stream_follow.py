"""The master's follow logic, pure: a listing in, the partitions to append and the position out
(no store, no files, no socket)."""

from __future__ import annotations

import dataclasses

import pytest

from elasticps.data.manifest import ChunkRef, Manifest
from elasticps.data.schema import Schema
from elasticps.data.stream import Partition, schema_fingerprint
from elasticps.errors import InvalidArgumentError
from elasticps.master.stream_follow import (
    MAX_PARTITION_CHUNKS,
    Candidate,
    StreamPosition,
    decide,
)

SCHEMA = Schema.from_dict({"label": {"name": "y", "kind": "binary"},
                           "columns": {"c": {"kind": "categorical", "table": "t",
                                             "id_space": 100, "dtype": "int"}}})


def manifest(chunks: int = 2, rows: int = 10, schema: Schema = SCHEMA) -> Manifest:
    return Manifest(num_rows=chunks * rows, num_positive=0,
                    chunks=tuple(ChunkRef(f"part-{i:05d}.parquet", 0, rows)
                                 for i in range(chunks)),
                    schema=schema, columns=({"name": "y"}, {"name": "c"}))


def landed(*names: str, **kw: object) -> list[Candidate]:
    return [Candidate(Partition(n, 1000.0 + i), manifest(**kw))  # type: ignore[arg-type]
            for i, n in enumerate(names)]


def test_new_partitions_are_appended_in_name_order_with_their_chunks_under_their_name(
        ) -> None:
    decision = decide(StreamPosition(), landed("h=02", "h=01"), ended=False)
    assert [p.name for p in decision.take] == ["h=01", "h=02"]
    assert decision.take[0].chunks[1] == ChunkRef("h=01/part-00001.parquet", 0, 10)
    assert decision.take[0].time == 1001.0
    assert decision.position == StreamPosition(2, "h=02", schema_fingerprint(manifest()))
    assert (decision.refused, decision.complete) == ("", False)
    # The next step: what the position covers is never appended again.
    again = decide(decision.position, landed("h=01", "h=02", "h=03"), ended=False)
    assert [p.name for p in again.take] == ["h=03"]
    assert again.position.partitions == 3


def test_a_backfill_passes_over_partitions_before_its_start() -> None:
    decision = decide(StreamPosition(), landed("dt=2026-10-31", "dt=2026-11-01/h=00",
                                               "dt=2026-11-02"),
                      ended=False, start="dt=2026-11-01")
    assert [p.name for p in decision.take] == ["dt=2026-11-01/h=00", "dt=2026-11-02"]


def test_at_most_limit_partitions_per_step_and_the_stream_is_not_complete_before_all(
        ) -> None:
    first = decide(StreamPosition(), landed("a", "b", "c"), ended=True, limit=2)
    assert [p.name for p in first.take] == ["a", "b"]
    assert not first.complete
    rest = decide(first.position, landed("c"), ended=True, limit=2)
    assert [p.name for p in rest.take] == ["c"]
    assert rest.complete
    # Unread partitions beyond the candidates (more=True) keep it open too.
    assert not decide(rest.position, [], ended=True, more=True).complete
    assert decide(rest.position, [], ended=True).complete
    assert not decide(rest.position, [], ended=False).complete
    with pytest.raises(InvalidArgumentError):
        decide(StreamPosition(), [], ended=False, limit=0)


def test_a_partition_of_another_schema_stops_the_stream_there_until_it_is_rewritten() -> None:
    start = decide(StreamPosition(), landed("a"), ended=False).position
    other = dataclasses.replace(SCHEMA, labels=tuple(
        dataclasses.replace(label, kind="float") for label in SCHEMA.labels))
    listing = [*landed("b"), Candidate(Partition("c"), manifest(schema=other)),
               *landed("d")]
    stopped = decide(start, listing, ended=True)
    assert [p.name for p in stopped.take] == ["b"]  # before it: appended
    assert "partition c has another schema" in stopped.refused
    assert "(labels [{'classes': None, 'kind': 'float'" in stopped.refused
    assert "not [{'classes': None, 'kind': 'binary'" in stopped.refused
    assert not stopped.complete  # the end marker is there, but the stream waits at c
    assert stopped.position.last == "b"
    # Rewritten with the first partition's schema: the stream goes on from c.
    fixed = decide(stopped.position, landed("c", "d"), ended=True)
    assert [p.name for p in fixed.take] == ["c", "d"]
    assert (fixed.refused, fixed.complete) == ("", True)


def test_unreadable_oversized_and_badly_named_partitions_are_refused_by_name() -> None:
    unreadable = decide(StreamPosition(), [Candidate(Partition("a"), error="bad JSON")],
                        ended=False)
    assert unreadable.take == ()
    assert "partition a cannot be read: bad JSON" in unreadable.refused
    huge = decide(StreamPosition(), landed("a", chunks=MAX_PARTITION_CHUNKS + 1, rows=1),
                  ended=False)
    assert huge.take == ()
    assert f"more than {MAX_PARTITION_CHUNKS}" in huge.refused
    named = decide(StreamPosition(), landed("a b"), ended=False)
    assert named.take == ()
    assert "'a b'" in named.refused
