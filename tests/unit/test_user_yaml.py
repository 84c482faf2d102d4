"""Hostile YAML in a job spec or a dataset schema, through the real command line: each is a
clear error naming the file, in well under the time and memory a careless reader would spend,
with no traceback and nothing written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from elasticps.cluster.spec import Job
from elasticps.errors import ConfigError
from elasticps.user_yaml import MAX_ALIAS_NODES, load_user_yaml
from tests.helpers import CliResult, run_cli

# A 743-byte spec whose `trainers` is 9^8 lists of 9 strings once its aliases are written out.
LAUGHS = "\n".join(
    ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 9) + "]" for i in range(1, 9)]
)
SPEC_TAIL = "job_name: ctr\nentry_point: python train.py\n"
HOSTILE = {
    "billion laughs": (f"{LAUGHS}\n{SPEC_TAIL}trainers: *lol8\n".encode(), "aliases"),
    "20,000 levels": (f"{SPEC_TAIL}trainers: {'[' * 20_000}{']' * 20_000}\n".encode(),
                      "more than 100 levels deep"),
    "not UTF-8": (f"{SPEC_TAIL}image: caf".encode() + b"\xe9\n", "not UTF-8 text: byte"),
    "a recursive alias": (f"{SPEC_TAIL}env: &e {{A: *e}}\n".encode(), "recursive alias"),
    "a 5,000-digit integer": (f"{SPEC_TAIL}trainers: {'1' * 5000}\n".encode(),
                              "cannot be read"),
}


def _refused(result: CliResult, path: Path, reason: str, started: float) -> None:
    assert time.monotonic() - started < 10, "the hostile file took too long to refuse"
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert str(path) in result.stderr, result.stderr
    assert reason in result.stderr, result.stderr


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_job_spec_is_a_clear_error(name: str, tmp_path: Path) -> None:
    text, reason = HOSTILE[name]
    spec = tmp_path / "job.yaml"
    spec.write_bytes(text)
    started = time.monotonic()
    result = run_cli("submit", str(spec), "--dry-run")
    _refused(result, spec, reason, started)
    assert result.stdout == ""


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_schema_is_a_clear_error_and_nothing_is_written(name: str,
                                                                  tmp_path: Path) -> None:
    text, reason = HOSTILE[name]
    schema = tmp_path / "schema.yaml"
    schema.write_bytes(text.replace(SPEC_TAIL.encode(), b"label: click\n"))
    rows = tmp_path / "rows.csv"
    rows.write_text("click,x\n1,2\n")
    out = tmp_path / "dataset"
    started = time.monotonic()
    result = run_cli("data", "convert", "csv", str(rows), "--schema", str(schema),
                     "--out", str(out))
    _refused(result, schema, reason, started)
    assert not out.exists()


def test_a_few_shared_anchors_still_work(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"{SPEC_TAIL}tables: {{ids: &policy {{max_rows: 100}}, more: *policy}}\n")
    job = Job.from_yaml(spec)
    assert job.tables["more"] == job.tables["ids"] == {"max_rows": 100}


def test_aliases_may_add_up_to_the_bound() -> None:
    items = ", ".join(["*row"] * (MAX_ALIAS_NODES // 4))  # each alias adds a 4-node list
    doc = load_user_yaml(f"row: &row [1, 2, 3]\nrows: [{items}]\n", "t.yaml")
    assert len(doc["rows"]) == MAX_ALIAS_NODES // 4
    more = ", ".join(["*row"] * (MAX_ALIAS_NODES // 4 + 1))
    with pytest.raises(ConfigError, match=r"t\.yaml: its aliases"):
        load_user_yaml(f"row: &row [1, 2, 3]\nrows: [{more}]\n", "t.yaml")
