"""A stream's partition source over a local prefix: what is committed, in which order, with
which time; the end marker and its command; what every partition must share with the first."""

from __future__ import annotations

import calendar
import json
from pathlib import Path

import numpy as np
import pytest

from elasticps.cli import main
from elasticps.data.from_table import write_dataset
from elasticps.data.manifest import read_manifest
from elasticps.data.stream import (
    END_MARKER,
    FsspecPartitionSource,
    Partition,
    partition_time,
    schema_difference,
    schema_fingerprint,
    schema_shape,
)
from elasticps.errors import DataError

SCHEMA = {"label": {"name": "y", "kind": "binary"},
          "columns": {"x": {"kind": "dense"}, "c": {"kind": "categorical", "table": "t",
                                                   "id_space": 100}}}


def land(prefix: Path, name: str, rows: int = 20, *, scale: float = 1.0,
         schema: dict[str, object] | None = None) -> Path:
    """Write one partition (its manifest last: the commit)."""
    rng = np.random.default_rng(len(name))
    out = prefix / name
    write_dataset({"y": rng.integers(0, 2, rows).astype(np.int8),
                   "x": rng.normal(0, scale, rows).astype(np.float32),
                   "c": rng.integers(0, 50, rows)}, str(out), schema or SCHEMA,
                  rows_per_chunk=10, overwrite=True)
    return out


def utc(*fields: int) -> float:
    return float(calendar.timegm((*fields, 0, 0, 0)[:6]))


def test_partition_time_reads_hive_date_hour_and_minute_keys_as_utc() -> None:
    assert partition_time("dt=2026-12-01/hour=13") == utc(2026, 12, 1, 13)
    assert partition_time("date=20261201/hour=07/minute=30") == utc(2026, 12, 1, 7, 30)
    assert partition_time("region=eu/day=2026-02-28") == utc(2026, 2, 28)
    assert partition_time("part-0007") is None  # no date key: no time
    for bad, said in (("dt=2026-13-01", "not a day"), ("dt=2026-02-30", "not a day"),
                      ("dt=2026-12-01/hour=24", "from 0 to 23"), ("dt=12/01", "not a date"),
                      ("dt=2026-12-01/minute=x", "from 0 to 59")):
        with pytest.raises(DataError, match=said):
            partition_time(bad)


def test_only_partitions_whose_manifest_exists_are_listed_in_name_order(
        tmp_path: Path) -> None:
    source = FsspecPartitionSource(str(tmp_path / "clicks"))
    assert list(source.partitions(None)) == []  # the prefix is not even there yet
    land(tmp_path / "clicks", "dt=2026-12-01/hour=14")
    land(tmp_path / "clicks", "dt=2026-12-01/hour=13")
    half = land(tmp_path / "clicks", "dt=2026-12-01/hour=15")
    (half / "manifest.json").unlink()  # data written, manifest not yet: not committed
    land(tmp_path / "clicks", "_tmp/dt=2026-12-01/hour=16")  # a writer's hidden directory
    inner = land(tmp_path / "clicks", "dt=2026-12-01/hour=13/test")  # a partition's split
    assert inner.exists()

    names = [p.name for p in source.partitions(None)]
    assert names == ["dt=2026-12-01/hour=13", "dt=2026-12-01/hour=14"]
    assert source.partitions(None)[0] == Partition("dt=2026-12-01/hour=13",
                                                   utc(2026, 12, 1, 13))
    assert [p.name for p in source.partitions("dt=2026-12-01/hour=13")] == [
        "dt=2026-12-01/hour=14"]
    land(tmp_path / "clicks", "dt=2026-12-01/hour=15")  # its commit: now it is there
    assert [p.name for p in source.partitions("dt=2026-12-01/hour=14")] == [
        "dt=2026-12-01/hour=15"]
    assert source.manifest(Partition("dt=2026-12-01/hour=14")).num_rows == 20


def test_the_end_marker_and_its_command(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "clicks"
    source = FsspecPartitionSource(str(prefix))
    assert not source.ended()
    assert main(["data", "stream-end", str(prefix)]) == 0
    assert END_MARKER in capsys.readouterr().out
    assert source.ended()
    first = (prefix / END_MARKER).read_bytes()
    assert json.loads(first)["ended_at"] > 0
    assert main(["data", "stream-end", str(prefix)]) == 0
    assert (prefix / END_MARKER).read_bytes() == first  # the stream ended when it first said
    assert list(source.partitions(None)) == []  # the marker is no partition


def test_partitions_share_the_first_ones_schema_whatever_their_dense_statistics(
        tmp_path: Path) -> None:
    first = read_manifest(str(land(tmp_path, "dt=2026-12-01")))
    wider = read_manifest(str(land(tmp_path, "dt=2026-12-02", scale=50.0)))
    assert first.schema != wider.schema  # each conversion measured its own statistics
    assert schema_fingerprint(first) == schema_fingerprint(wider)
    other = dict(SCHEMA, columns={"x": {"kind": "dense"},
                                  "c": {"kind": "categorical", "table": "t", "id_space": 999}})
    changed = read_manifest(str(land(tmp_path, "dt=2026-12-03", schema=other)))
    assert schema_fingerprint(changed) != schema_fingerprint(first)
    said = schema_difference(schema_shape(first), schema_shape(changed))
    assert said == ("tables {'t': {'dim': 8, 'id_space': 999}}, not "
                    "{'t': {'dim': 8, 'id_space': 100}}")
