from __future__ import annotations

import json
from pathlib import Path

from elasticps.data import open_dataset
from elasticps.data.criteo_schema import criteo_preset
from tests.helpers import REPO, run_cli


def test_synth_then_inspect_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "ctr"
    made = run_cli("data", "synth", "ctr", "--rows", "2000", "--seed", "4", "--out", str(out),
                   "--rows-per-chunk", "512", "--test-rows", "300")
    assert made.returncode == 0, made.stderr
    assert "best AUC" in made.stdout
    shown = run_cli("data", "inspect", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert (info["rows"], info["chunks"], info["splits"]) == (2000, 4, {"test": "test"})
    assert 0.7 < info["best_auc"] < 0.9
    assert info["missing_rates"]["I12"] > 0.5  # Criteo's sparsest integer column
    text = run_cli("data", "inspect", str(out / "test"))
    assert "rows          300" in text.stdout
    assert "best AUC" in text.stdout
    again = run_cli("data", "synth", "ctr", "--rows", "10", "--seed", "4", "--out", str(out))
    assert again.returncode == 1
    assert "not empty" in again.stderr


def test_convert_criteo_end_to_end_and_malformed_input(tmp_path: Path) -> None:
    tiny = (REPO / "tests" / "data" / "criteo_tiny.tsv").read_text().splitlines()
    good = tmp_path / "good.tsv"
    good.write_text("\n".join(tiny) + "\n")
    done = run_cli("data", "convert", "criteo", str(good), "--out", str(tmp_path / "ds"),
                   "--rows-per-chunk", "8", "--dense-norm", "minmax", "--id-space", "1000")
    assert done.returncode == 0, done.stderr
    assert "wrote 20 rows in 3 chunks" in done.stdout
    assert open_dataset(str(tmp_path / "ds")).schema == criteo_preset(1000, "minmax")
    info = json.loads(run_cli("data", "inspect", str(tmp_path / "ds"), "--json").stdout)
    assert info["rows"] == 20
    assert info["label_rate"] == 5 / 20

    bad = tmp_path / "bad.tsv"
    bad.write_text("\n".join([*tiny[:4], "1\tnot-a-number", *tiny[4:]]) + "\n")
    failed = run_cli("data", "convert", "criteo", str(bad), "--out", str(tmp_path / "bad-ds"))
    assert failed.returncode == 1
    assert f"{bad}:5" in failed.stderr
    assert "expected 40 fields, found 2" in failed.stderr
    assert not (tmp_path / "bad-ds").exists()
    tolerated = run_cli("data", "convert", "criteo", str(bad), "--out", str(tmp_path / "ok"),
                        "--max-bad-rows", "1")
    assert tolerated.returncode == 0, tolerated.stderr
    assert "wrote 20 rows" in tolerated.stdout
    assert f"Skipping malformed row {bad}:5: expected 40 fields" in tolerated.stderr


def test_help_teaches_the_commands() -> None:
    shown = run_cli("data", "--help")
    assert shown.returncode == 0
    for word in ("convert", "synth", "inspect", "elasticps data synth ctr"):
        assert word in shown.stdout
