"""``elasticps data inspect``: columns line up whatever the names' lengths, and a closed pipe
(``| head``) ends the command quietly with SIGPIPE's status."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from elasticps import cli
from elasticps.data import write_dataset
from tests.helpers import run_cli

LONG = "number_of_items_in_the_customers_basket_at_checkout"
SCHEMA = {"label": "y", "columns": {
    LONG: "dense", "c": "categorical", "description_of_the_product": {"kind": "text"},
    "embedding": {"kind": "dense_vector", "length": 2}, "row": "ignore"}}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    rows = 20
    write_dataset({"y": np.arange(rows) % 2, LONG: np.arange(rows, dtype=float),
                   "c": ["a", "b"] * 10, "description_of_the_product": ["a red hat"] * rows,
                   "embedding": [[0.5, 1.5]] * rows, "row": np.arange(rows)},
                  str(tmp_path / "ds"), SCHEMA)
    return tmp_path / "ds"


def test_columns_line_up_whatever_the_names_lengths(dataset: Path) -> None:
    shown = run_cli("data", "inspect", str(dataset))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = lines.index("columns:") + 1
    rows = lines[start:start + 5]
    parts = [re.fullmatch(r"  (\S+) {2,}(\S+(?: \S+)?) {2,}(\S.*)", line) for line in rows]
    assert all(parts), rows  # name, kind and detail, two spaces or more between them
    assert [m.group(1) for m in parts if m] == [LONG, "c", "description_of_the_product",
                                                "embedding", "row"]
    assert len({m.start(2) for m in parts if m}) == 1  # every kind starts in one column
    assert len({m.start(3) for m in parts if m}) == 1  # and every detail
    assert "length 2, not normalised" in rows[3]
    assert "tokenizer words" in rows[2]
    assert rows[4].split()[1:] == ["ignore", "left", "out", "(not", "stored)"]
    rates = lines[lines.index("missing rate per column:") + 1:]
    cells = [cell for line in rates for cell in line.split("%") if cell.strip()]
    assert {len(cell) for cell in cells[:-1]} == {len(cells[0])}  # equal widths...
    assert all(len(line) <= 100 for line in rates)  # ... as many as fit a line


def test_a_closed_pipe_ends_the_command_quietly_with_sigpipes_status(
        dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head) is gone before the first line is written
    stdout = io.TextIOWrapper(io.FileIO(write_end, "w"))
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", errors)
    try:
        code = cli.main(["data", "inspect", str(dataset)])
    finally:
        stdout.close()  # what it buffered goes to /dev/null now: no second error
    assert code == 128 + signal.SIGPIPE
    assert errors.getvalue() == ""
