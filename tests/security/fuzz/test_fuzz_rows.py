"""Fuzz: CSV rows and Criteo TSV lines of any content through the real converters; only
DataError (MalformedInputError naming file:line:column) comes out, and a conversion that
succeeds holds as many rows as were good."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticps.data import Schema, open_dataset
from elasticps.data.bad_rows import BadRows
from elasticps.data.convert import WriteOptions, convert
from elasticps.data.criteo_convert import convert_criteo
from elasticps.data.source_text import TextSource
from elasticps.errors import DataError
from tests.security.fuzz.common import SLOW_FUZZ
from tests.unit.data.test_convert_tables import HEADER, ROWS, SCHEMA

_counter = itertools.count()
# Fields near the valid ones, plus the characters that break naive parsers.
fields = st.one_of(
    st.sampled_from(["1", "0", "23.5", "260.0", "2.6e2", "NA", "?", "", "US", "Drama|War",
                     "1e999", "-0", "9" * 30, "nan", "inf", '"', '""', '"a,b"', " 7 ",
                     "0x1F", "\t", "|", "||"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
)
# Mostly the header's seven fields (so rows reach the value parsers), sometimes any count.
rows = (st.lists(fields, min_size=7, max_size=7) | st.lists(fields, max_size=9)).map(",".join)
criteo_fields = st.one_of(
    st.sampled_from(["0", "1", "", "5", "-3", "68fd1e64", "zz", "80e26c9b", "1.5", "9" * 25]),
    st.text(alphabet="0123456789abcdefgxyz-. ", max_size=10))
criteo_lines = (st.lists(criteo_fields, min_size=40, max_size=40)
                | st.lists(criteo_fields, min_size=1, max_size=42)).map("\t".join)


def _fresh(tmp: Path) -> Path:
    path = tmp / f"case-{next(_counter)}"
    path.mkdir()
    return path


@pytest.mark.timeout(120)
@SLOW_FUZZ
@given(lines=st.lists(rows | st.sampled_from(ROWS), min_size=1, max_size=6),
       max_bad=st.integers(0, 3))
def test_csv_rows_raise_only_data_error(tmp_path_factory: pytest.TempPathFactory,
                                        lines: list[str], max_bad: int) -> None:
    tmp = _fresh(tmp_path_factory.getbasetemp())
    src = tmp / "in.csv"
    src.write_text(HEADER + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    bad = BadRows(max_bad)
    source = TextSource(str(src), delimiter=",", header=True, order=(), bad=bad)
    try:
        report = convert([source], Schema.from_yaml(SCHEMA), str(tmp / "ds"),
                         options=WriteOptions(rows_per_chunk=4), bad=bad)
    except DataError:
        return
    assert open_dataset(str(tmp / "ds")).num_rows == report.rows


@pytest.mark.timeout(120)
@SLOW_FUZZ
@given(lines=st.lists(criteo_lines, min_size=1, max_size=6), max_bad=st.integers(0, 3))
def test_criteo_lines_raise_only_data_error(tmp_path_factory: pytest.TempPathFactory,
                                            lines: list[str], max_bad: int) -> None:
    tmp = _fresh(tmp_path_factory.getbasetemp())
    src = tmp / "day.tsv"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        report = convert_criteo([str(src)], str(tmp / "ds"), max_bad_rows=max_bad,
                                rows_per_chunk=4, progress=False)
    except DataError:
        return
    assert open_dataset(str(tmp / "ds")).num_rows == report.rows
