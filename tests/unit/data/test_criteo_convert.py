from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from elasticps.data import criteo_convert as criteo
from elasticps.data import open_dataset
from elasticps.data.criteo_convert import convert_criteo
from elasticps.data.criteo_export import dataset_to_criteo_text
from elasticps.errors import DataError, MalformedInputError
from tests.unit.data.helpers import COLUMNS, parse_file


def read_rows(url: str) -> list[dict[str, int | None]]:
    ds = open_dataset(url)
    rows: list[dict[str, int | None]] = []
    for chunk in ds.chunks:
        rows += ds.read_chunk(chunk, COLUMNS).to_pylist()
    return rows


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


def test_gzip_input_and_several_inputs_append_in_order(tiny_tsv: Path, tmp_path: Path) -> None:
    gz = tmp_path / "part2.tsv.gz"
    gz.write_bytes(gzip.compress(tiny_tsv.read_bytes()))
    report = convert_criteo([str(tiny_tsv), str(gz)], str(tmp_path / "ds"), progress=False)
    assert report.rows == 40
    assert read_rows(str(tmp_path / "ds")) == parse_file(tiny_tsv) * 2


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
        9: _with_field(lines[8], 14, "12345zzz"),             # C1 not hex
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
    return path, {3: "fields", 6: "I1", 9: "C1", 12: "label", 15: "label", 17: "fields"}


@pytest.mark.parametrize("block_size", [criteo.BLOCK_SIZE, 700])
def test_malformed_lines_are_reported_with_line_numbers(
    tiny_tsv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_size: int
) -> None:
    # A small block size spreads the file over many blocks, so line numbers must carry across.
    monkeypatch.setattr(criteo, "BLOCK_SIZE", block_size)
    path, bad = _malformed_file(tiny_tsv, tmp_path)
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=6, progress=False)
    assert report.rows == 14
    assert report.bad_rows == 6
    assert report.blank_lines == 1
    # file:line:column for a bad value, file:line for a wrong number of fields
    located = [where.removeprefix(f"{path}:").split(":") for where, _ in report.bad_lines]
    numbers = [int(parts[0]) for parts in located]
    assert numbers == sorted(numbers)
    got = {int(parts[0]): (parts[1] if len(parts) > 1 else "fields") + ": " + why
           for parts, (_, why) in zip(located, report.bad_lines, strict=True)}
    assert sorted(got) == sorted(bad)
    for number, what in bad.items():
        assert got[number].startswith(what), (number, got[number])
    assert "'x7'" in got[6]
    assert "'12345zzz'" in got[9]
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
    assert len(report.bad_lines) == criteo.MAX_REPORTED
    assert [where for where, _ in report.bad_lines][:2] == [f"{path}:2:I3", f"{path}:4:I3"]
    with pytest.raises(MalformedInputError, match="40 malformed line"):
        convert_criteo([str(path)], str(tmp_path / "ds2"), max_bad_rows=39, progress=False)


def test_crlf_endings_and_non_utf8_bytes(tiny_tsv: Path, tmp_path: Path) -> None:
    lines = tiny_tsv.read_bytes().split(b"\n")[:5]
    fields = lines[1].split(b"\t")
    fields[14] = b"\xff\xfe0000aa"
    lines[1] = b"\t".join(fields)
    path = tmp_path / "dos.tsv"
    path.write_bytes(b"\r\n".join(lines) + b"\r\n")
    report = convert_criteo([str(path)], str(tmp_path / "ds"), max_bad_rows=1, progress=False)
    reason = "'\\\\xff\\\\xfe0000aa' is not 8 hex digits"
    assert report.bad_lines == [(f"{path}:2:C1", reason)]
    expected = parse_file(tiny_tsv)[:5]
    del expected[1]
    assert read_rows(str(tmp_path / "ds")) == expected
