"""``convert criteo``: Criteo text through the one converter, into a dataset that declares the
Criteo preset and reads exactly as format 1 did."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest

from elasticps.data import DenseStats, FeatureConfig, Schema, open_dataset, source_text
from elasticps.data.bad_rows import MAX_REPORTED
from elasticps.data.criteo_convert import convert_criteo
from elasticps.data.criteo_export import dataset_to_criteo_text
from elasticps.data.criteo_layout import SPARSE_COLUMNS
from elasticps.data.criteo_layout import arrow_schema as format_1_types
from elasticps.data.criteo_schema import criteo_preset
from elasticps.data.features import declared_features, hash_categorical
from elasticps.errors import ConfigError, DataError, MalformedInputError
from tests.helpers import REPO
from tests.unit.data.helpers import COLUMNS, parse_file
from tests.unit.data.v1_batches import CASES, case_batches, mismatches, read_reference

V1 = REPO / "tests" / "data" / "v1_ctr"
REFERENCE = REPO / "tests" / "data" / "v1_ctr_batches.npz"


def read_rows(url: str) -> list[dict[str, int | None]]:
    ds = open_dataset(url)
    rows: list[dict[str, int | None]] = []
    for chunk in ds.chunks:
        rows += ds.read_chunk(chunk, COLUMNS).to_pylist()
    return rows


def located(bad_lines: list[str], path: Path) -> dict[int, str]:
    """``path:LINE:COLUMN: reason`` -> {LINE: "COLUMN: reason"}; ``path:LINE: reason`` (a
    wrong field count) -> {LINE: "fields: reason"}."""
    out = {}
    for line in bad_lines:
        where, _, reason = line.removeprefix(f"{path}:").partition(" ")
        number, _, column = where.rstrip(":").partition(":")
        out[int(number)] = f"{column or 'fields'}: {reason}"
    return out


def test_tiny_sample_round_trip_keeps_every_value(tiny_tsv: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    report = convert_criteo([str(tiny_tsv)], str(out), rows_per_chunk=6, progress=False)
    expected = parse_file(tiny_tsv)
    assert report.rows == len(expected) == 20
    assert report.bad_rows == 0
    assert read_rows(str(out)) == expected
    # The sample has missing ints, negative ints and missing categoricals; all came through.
    assert any(row["I2"] is not None and row["I2"] < 0 for row in expected)
    assert any(row["I1"] is None for row in expected)
    assert any(row["C26"] is None for row in expected)
    manifest = open_dataset(str(out)).manifest
    assert [c.num_rows for c in manifest.chunks] == [6, 6, 6, 2]
    assert manifest.num_positive == sum(row["label"] for row in expected)
    for name in COLUMNS[1:]:
        assert manifest.null_counts[name] == sum(row[name] is None for row in expected)


def test_the_dataset_declares_the_preset_and_stores_format_1s_types(
        tiny_tsv: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    convert_criteo([str(tiny_tsv)], str(out), id_space=1000, dense_norm="minmax", progress=False)
    ds = open_dataset(str(out))
    assert not ds.manifest.is_criteo_layout  # format 2: the schema is in the manifest
    # minmax reads the preset's fixed clip range, which conversion keeps (not the data's range)
    assert ds.schema == criteo_preset(1000, "minmax")
    assert declared_features(ds.schema) == FeatureConfig(id_space=1000, dense_norm="minmax")
    assert pq.read_schema(out / "part-00000.parquet").remove_metadata() == format_1_types()
    assert ds.manifest.source["kind"] == "criteo"
    # The default: log(1 + x), missing -1, as the CTR example trains; its statistics measured.
    convert_criteo([str(tiny_tsv)], str(tmp_path / "log"), progress=False)
    schema = open_dataset(str(tmp_path / "log")).schema
    assert declared_features(schema) == FeatureConfig(dense_norm="log-missing")
    stats = schema.column("I1").stats
    assert stats is not None
    assert stats.count == sum(row["I1"] is not None for row in parse_file(tiny_tsv))
    with pytest.raises(ConfigError, match="dense_norm='zscore'"):
        convert_criteo([str(tiny_tsv)], str(tmp_path / "x"), dense_norm="zscore")


def test_batches_equal_those_of_the_format_1_reference_of_the_same_rows(tmp_path: Path) -> None:
    # tests/data/v1_ctr is a format-1 dataset whose batches, for every FeatureConfig, resume
    # point and shuffle, are pinned in the reference; its rows written back as Criteo text and
    # converted with each case's id space and norm must read as the same batches.
    got = {}
    for split, url in (("train", V1), ("test", V1 / "test")):
        text = tmp_path / f"{split}.tsv"
        dataset_to_criteo_text(str(url), str(text))
        for case, (_, _, features, _) in enumerate(CASES):
            out = tmp_path / f"{split}-{case}"
            convert_criteo([str(text)], str(out), id_space=features.id_space,
                           dense_norm=features.dense_norm, rows_per_chunk=200, progress=False)
            got.update(case_batches(str(out), case, f"{split}/{case}"))
    assert mismatches(got, read_reference(REFERENCE)) == []


def test_ids_are_format_1s_hash_and_a_feature_config_must_agree(tmp_path: Path) -> None:
    sample = REPO / "tests" / "data" / "criteo_sample_100.tsv"
    out = tmp_path / "criteo"
    report = convert_criteo([str(sample)], str(out), rows_per_chunk=32, progress=False)
    assert report.rows == 100
    ds = open_dataset(str(out))
    declared = FeatureConfig(dense_norm="log-missing")
    batches = list(ds.iter_batches(16, features=declared))
    assert [len(b) for b in batches] == [16, 16, 16, 16, 16, 16, 4]  # chunks of 32, 32, 32, 4
    assert sorted(batches[0].ids) == sorted(SPARSE_COLUMNS)
    line = sample.read_text().splitlines()[0].split("\t")
    value = np.array([[int(line[14], 16)]], dtype=np.uint32)
    assert batches[0].ids["C1"][0] == hash_categorical(value, np.zeros((1, 1), bool),
                                                       1_000_001)[0, 0]
    as_declared = list(ds.iter_batches(16))  # the default FeatureConfig: as declared
    assert all(np.array_equal(a.dense, b.dense) for a, b in zip(batches, as_declared,
                                                                strict=True))
    with pytest.raises(DataError, match="declares FeatureConfig"):
        list(ds.iter_batches(16, features=FeatureConfig(dense_norm="log")))


def test_only_the_criteo_preset_declares_a_feature_config() -> None:
    minmax = criteo_preset(1000, "minmax")
    assert declared_features(minmax) == FeatureConfig(id_space=1000, dense_norm="minmax")
    log = criteo_preset(dense_norm="log")
    measured = DenseStats(count=3, mean=1.0, std=0.5, min=0.0, max=2.0)
    # log reads no statistics, so measured ones change nothing; minmax reads its range
    assert declared_features(log.replace_column(
        dataclasses.replace(log.column("I1"), stats=measured))) == FeatureConfig(dense_norm="log")
    assert declared_features(minmax.replace_column(
        dataclasses.replace(minmax.column("I1"), stats=measured))) is None
    assert declared_features(minmax.replace_column(
        dataclasses.replace(minmax.column("C1"), salt=None))) is None
    assert declared_features(Schema.from_dict({"label": "y", "columns": {"x": "dense"}})) is None


def test_shared_sample_converts_cleanly_and_writes_back_identically(
    shared_sample: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ds"
    report = convert_criteo([str(shared_sample)], str(out), rows_per_chunk=32, progress=False)
    assert (report.rows, report.bad_rows, report.blank_lines) == (100, 0, 0)
    assert report.manifest is not None
    assert report.manifest.num_positive == 29
    assert read_rows(str(out)) == parse_file(shared_sample)
    text = tmp_path / "back.tsv"
    dataset_to_criteo_text(str(out), str(text))
    assert text.read_bytes() == shared_sample.read_bytes() + b"\n"  # the input lacks the last \n


def test_comma_separated_with_header_and_extra_column(tiny_tsv: Path, tmp_path: Path) -> None:
    lines = tiny_tsv.read_text().splitlines()
    csv_path = tmp_path / "train.csv"
    # A Kaggle-style layout: an Id column first, capitalised "Label".
    header = ",".join(["Id", "Label", *COLUMNS[1:]])
    body = [f"{i},{line.replace(chr(9), ',')}" for i, line in enumerate(lines)]
    csv_path.write_text("\n".join([header, *body]) + "\n")
    convert_criteo([str(csv_path)], str(tmp_path / "ds"), progress=False)
    assert read_rows(str(tmp_path / "ds")) == parse_file(tiny_tsv)


def test_a_header_may_name_the_columns_in_any_order_and_repeat_one(
        tiny_tsv: Path, tmp_path: Path) -> None:
    rows = [line.split("\t") for line in tiny_tsv.read_text().splitlines()]
    order = list(reversed(range(40)))
    # C26 twice: the first is the column, the second an extra one (ignored)
    names = [COLUMNS[i].lower() for i in order] + ["c26"]
    path = tmp_path / "shuffled.tsv"
    path.write_text("\n".join(["\t".join(names)] + ["\t".join([*(row[i] for i in order), "x"])
                                                    for row in rows]) + "\n")
    convert_criteo([str(path)], str(tmp_path / "ds"), progress=False)
    assert read_rows(str(tmp_path / "ds")) == parse_file(tiny_tsv)


def test_gzip_input_and_several_inputs_append_in_order(tiny_tsv: Path, tmp_path: Path) -> None:
    gz = tmp_path / "part2.tsv.gz"
    gz.write_bytes(gzip.compress(tiny_tsv.read_bytes()))
    report = convert_criteo([str(tiny_tsv), str(gz)], str(tmp_path / "ds"), progress=False)
    assert report.rows == 40
    assert read_rows(str(tmp_path / "ds")) == parse_file(tiny_tsv) * 2


def test_any_fsspec_url_is_an_input_and_an_output(tiny_tsv: Path) -> None:
    src = "memory://criteo-convert/in.tsv"
    with fsspec.open(src, "wb") as out:
        out.write(tiny_tsv.read_bytes())
    report = convert_criteo([src], "memory://criteo-convert/ds", progress=False)
    assert report.rows == 20
    assert read_rows("memory://criteo-convert/ds") == parse_file(tiny_tsv)


def test_chunks_per_file_starts_new_files(tiny_tsv: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    convert_criteo(
        [str(tiny_tsv)], str(out), rows_per_chunk=3, chunks_per_file=2, progress=False
    )
    chunks = open_dataset(str(out)).chunks
    assert [(c.path, c.row_group) for c in chunks[:3]] == [
        ("part-00000.parquet", 0), ("part-00000.parquet", 1), ("part-00001.parquet", 0),
    ]
    assert len({c.path for c in chunks}) == 4  # 7 chunks, 2 per file
    for chunk in chunks:
        assert pq.ParquetFile(out / chunk.path).metadata.row_group(chunk.row_group).num_rows == (
            chunk.num_rows
        )


def _with_field(line: str, index: int, text: str) -> str:
    fields = line.split("\t")
    fields[index] = text
    return "\t".join(fields)


def _malformed_file(tiny_tsv: Path, tmp_path: Path) -> tuple[Path, dict[int, str]]:
    lines = tiny_tsv.read_text().splitlines()
    broken = {
        3: lines[2].rsplit("\t", 1)[0],                       # 39 fields
        6: _with_field(lines[5], 1, "x7"),                    # I1 not an integer
        7: _with_field(lines[6], 2, "3000000000"),            # I2 outside int32
        9: _with_field(lines[8], 14, "12345zzz"),             # C1 not hex
        10: _with_field(lines[9], 20, "abc"),                 # C7 not 8 digits
        12: "2" + lines[11][1:],                              # label 2
        15: lines[14][1:],                                    # empty label
        17: lines[16] + "\textra",                            # 41 fields
    }
    out_lines = list(lines)
    for number, text in broken.items():
        out_lines[number - 1] = text
    out_lines.insert(19, "")  # a blank line (line 20): skipped, not malformed
    path = tmp_path / "broken.tsv"
    path.write_text("\n".join(out_lines) + "\n")
    return path, {3: "fields", 6: "I1", 7: "I2", 9: "C1", 10: "C7", 12: "label", 15: "label",
                  17: "fields"}


@pytest.mark.parametrize("block_size", [source_text.BLOCK_SIZE, 700])
def test_malformed_lines_are_reported_with_line_numbers(
    tiny_tsv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_size: int
) -> None:
    # A small block size spreads the file over many blocks, so line numbers must carry across.
    monkeypatch.setattr(source_text, "BLOCK_SIZE", block_size)
    path, bad = _malformed_file(tiny_tsv, tmp_path)
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=8, progress=False)
    assert report.rows == 12
    assert report.bad_rows == 8
    assert report.blank_lines == 1
    # file:line:column for a bad value, file:line for a wrong number of fields
    got = located(report.bad_lines, path)
    assert list(got) == sorted(got) == sorted(bad)
    for number, what in bad.items():
        assert got[number].startswith(what), (number, got[number])
    assert got[6] == "I1: 'x7' is not an integer"
    assert got[7] == "I2: 3000000000 is outside the int32 range"
    assert got[9] == "C1: '12345zzz' is not 8 hex digits"
    assert got[10] == "C7: 'abc' is not 8 hex digits"
    assert got[12] == "label: the label is 2, expected 0 or 1"
    assert got[15] == "label: the label is missing"
    assert got[3] == "fields: expected 40 fields, found 39"
    good = [row for i, row in enumerate(parse_file(tiny_tsv), start=1) if i not in bad]
    assert read_rows(str(tmp_path / "ds")) == good


def test_too_many_malformed_lines_fail_and_leave_nothing(
    tiny_tsv: Path, tmp_path: Path
) -> None:
    path, bad = _malformed_file(tiny_tsv, tmp_path)
    out = tmp_path / "ds"
    with pytest.raises(MalformedInputError) as info:
        convert_criteo([str(path)], str(out), max_bad_rows=2, progress=False)
    assert "more than --max-bad-rows=2" in str(info.value)
    assert {line for line, _ in info.value.bad_lines} <= set(bad)
    assert len(info.value.bad_lines) >= 3
    assert f"{path}:3" in str(info.value)
    assert not out.exists()


def test_existing_output_is_refused_unless_overwrite(tiny_tsv: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    convert_criteo([str(tiny_tsv)], str(out), rows_per_chunk=5, progress=False)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(DataError, match="not empty"):
        convert_criteo([str(tiny_tsv)], str(out), progress=False)
    assert sorted(p.name for p in out.iterdir()) == before
    convert_criteo([str(tiny_tsv)], str(out), rows_per_chunk=50, overwrite=True, progress=False)
    assert len(open_dataset(str(out)).chunks) == 1


def test_missing_input_and_bad_header_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        convert_criteo([str(tmp_path / "nope.tsv")], str(tmp_path / "ds"), progress=False)
    bad = tmp_path / "bad.csv"
    bad.write_text("label,I1,I2\n1,2,3\n")
    with pytest.raises(DataError, match="lacks column"):
        convert_criteo([str(bad)], str(tmp_path / "ds"), progress=False)
    assert not (tmp_path / "ds").exists()


def test_every_malformed_line_is_counted_beyond_those_listed(
    tiny_tsv: Path, tmp_path: Path
) -> None:
    line = tiny_tsv.read_text().splitlines()[0]
    lines = [_with_field(line, 3, "abc") if i % 2 else line for i in range(80)]
    path = tmp_path / "many.tsv"
    path.write_text("\n".join(lines) + "\n")
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=40, progress=False)
    assert (report.rows, report.bad_rows) == (40, 40)
    assert len(report.bad_lines) == MAX_REPORTED
    assert report.bad_lines[:2] == [f"{path}:2:I3: 'abc' is not an integer",
                                    f"{path}:4:I3: 'abc' is not an integer"]
    with pytest.raises(MalformedInputError, match="40 malformed row"):
        convert_criteo([str(path)], str(tmp_path / "ds2"), max_bad_rows=39, progress=False)


def test_crlf_endings_and_non_utf8_bytes(tiny_tsv: Path, tmp_path: Path) -> None:
    lines = tiny_tsv.read_bytes().split(b"\n")[:5]
    fields = lines[1].split(b"\t")
    fields[14] = b"\xff\xfe0000aa"
    lines[1] = b"\t".join(fields)
    path = tmp_path / "dos.tsv"
    path.write_bytes(b"\r\n".join(lines) + b"\r\n")
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=1, progress=False)
    assert report.bad_lines == [f"{path}:2:C1: '\\\\xff\\\\xfe0000aa' is not UTF-8 text"]
    expected = parse_file(tiny_tsv)[:5]
    del expected[1]
    assert read_rows(str(tmp_path / "ds")) == expected


def test_quotes_are_plain_characters_in_criteo_text(tiny_tsv: Path, tmp_path: Path) -> None:
    lines = tiny_tsv.read_text().splitlines()[:3]
    lines[1] = _with_field(lines[1], 14, '"05db9164"')
    path = tmp_path / "quoted.tsv"
    path.write_text("\n".join(lines) + "\n")
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=1, progress=False)
    assert report.bad_lines == [f"{path}:2:C1: '\"05db9164\"' is not 8 hex digits"]
