"""An export says everything a scorer needs, and labels are taken by value: a table with a
``yes``/``no`` label, dense columns whose order is not alphabetical and a string categorical,
and one with string class labels, each converted with ``--infer --label``, trained by
``examples/tabular`` under ``elasticps run`` (1 trainer, 1 pserver), then scored from the raw
CSV by ``raw_scorer.py``, which imports nothing of elasticps and learns the input order, the
normalisation, the hashing and the class values from the export alone. It gets the job's
metric; a scorer that feeds the dense columns alphabetically does not."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import REPO
from tests.integration.examples.jobs import Job, cli, run_job

SCRIPT = "examples/tabular/train.py"
TRAIN_ARGS = ["--hidden", "16,8", "--passes", "2", "--batch-size", "100", "--optimizer", "adam",
              "--lr", "0.01"]
CITIES = ["Oslo", "Lima", "Pune", "Kyiv", "Quito", "Accra"]
Row = dict[str, object]


def write_csv(path: Path, rows: list[Row]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def features(rng: np.random.Generator, n: int) -> tuple[list[Row], np.ndarray]:
    """Rows of columns in a non-alphabetical order, and each row's planted score: dense columns
    on very different scales, so feeding them in another order scores badly."""
    zeta, alpha, mid = rng.normal(100, 20, n), rng.normal(0, 1, n), rng.uniform(0, 1000, n)
    city = rng.integers(0, len(CITIES), n)
    score = 1.5 * (zeta - 100) / 20 - 2.0 * alpha + (city % 3 - 1.0)
    rows: list[Row] = [{"zeta": f"{zeta[i]:.3f}", "alpha": f"{alpha[i]:.4f}",
                        "city": CITIES[city[i]], "mid": f"{mid[i]:.1f}"} for i in range(n)]
    return rows, score


def make_tables(root: Path, label: Callable[[np.random.Generator, np.ndarray], list[str]],
                name: str) -> None:
    rng = np.random.default_rng(7)
    for split, n in (("train", 3000), ("test", 1500)):
        rows, score = features(rng, n)
        for row, value in zip(rows, label(rng, score), strict=True):
            row[name] = value
        write_csv(root / f"{split}.csv", rows)


def convert(root: Path, label: str) -> str:
    schema = cli("data", "convert", "csv", "train.csv", "--infer", "--label", label, cwd=root)
    (root / "schema.yaml").write_text(schema)
    cli("data", "convert", "csv", "train.csv", "--schema", "schema.yaml", "--out", "data",
        "--rows-per-chunk", "1000", cwd=root)
    cli("data", "convert", "csv", "test.csv", "--schema", "schema.yaml", "--like", "data",
        "--out", "test-data", cwd=root)
    return schema


def raw_score(job: Job, root: Path, *extra: str) -> dict[str, object]:
    """``raw_scorer.py`` beside a copy of ``export_chain.py``, in a directory of its own,
    without the repository on its path: as a serving job runs it."""
    serving = root / "serving"
    serving.mkdir(exist_ok=True)
    shutil.copy(REPO / "elasticps/trainer/export_chain.py", serving)
    shutil.copy(REPO / "tests/integration/examples/raw_scorer.py", serving)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-E", "-s", str(serving / "raw_scorer.py"),
                           str(job.workdir / "model"), str(root / "test.csv"), *extra],
                          cwd=serving, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


def test_a_scorer_that_imports_no_elasticps_gets_the_jobs_auc(tmp_path: Path) -> None:
    def bought(rng: np.random.Generator, score: np.ndarray) -> list[str]:
        clicked = rng.random(score.size) < 1 / (1 + np.exp(-score))
        return [rng.choice(["yes", "Yes", "YES"]) if c else rng.choice(["no", "No"])
                for c in clicked]

    make_tables(tmp_path, bought, "bought")
    schema = convert(tmp_path, "bought")
    assert "label: bought" in schema
    job = run_job(SCRIPT, tmp_path / "job", ["--data", str(tmp_path / "data"), "--test-data",
                                             str(tmp_path / "test-data"), *TRAIN_ARGS],
                  trainers=1, pservers=1)
    summary = job.summary
    assert summary["label_kind"] == "binary"
    assert summary["passes"] == 2
    assert f"final test auc {summary['auc']:.4f}" in job.proc.stdout
    assert summary["auc"] > 0.8  # the planted signal is strong: the model learnt it

    manifest = json.loads((job.workdir / "model" / "manifest.json").read_text())
    assert manifest["inputs"]["dense"] == ["zeta", "alpha", "mid"]  # as declared, not sorted
    assert list(manifest["schema"]["columns"]) == ["zeta", "alpha", "city", "mid"]
    scored = raw_score(job, tmp_path)
    print(f"job auc {summary['auc']:.6f}, raw scorer {scored['auc']:.6f}")
    assert scored["rows"] == summary["test_rows"] == 1500
    assert scored["auc"] == pytest.approx(summary["auc"], abs=1e-4)
    # Guessing the order (alphabetically, as the manifest's keys once were) scores wrong.
    guessed = raw_score(job, tmp_path, "--alphabetical")
    assert guessed["auc"] < summary["auc"] - 0.1


def test_string_classes_train_and_map_back_to_their_values(tmp_path: Path) -> None:
    def site(rng: np.random.Generator, score: np.ndarray) -> list[str]:
        noisy = score + rng.normal(0, 0.3, score.size)
        return [["im", "cp", "om"][int(k)] for k in np.digitize(noisy, [-1.0, 1.0])]

    make_tables(tmp_path, site, "site")
    schema = convert(tmp_path, "site")
    assert "label: {name: site, kind: class}" in schema
    job = run_job(SCRIPT, tmp_path / "job", ["--data", str(tmp_path / "data"), "--test-data",
                                             str(tmp_path / "test-data"), *TRAIN_ARGS],
                  trainers=1, pservers=1)
    summary = job.summary
    assert summary["label_kind"] == "class"
    assert f"final test accuracy {summary['accuracy']:.4f}" in job.proc.stdout
    assert summary["accuracy"] > 0.6  # three classes: chance is about 0.33
    manifest = json.loads((job.workdir / "model" / "manifest.json").read_text())
    assert manifest["inputs"]["label"]["values"] == ["cp", "im", "om"]
    scored = raw_score(job, tmp_path)
    assert scored["accuracy"] == pytest.approx(summary["accuracy"], abs=1e-3)
    assert set(scored["first_predictions"]) <= {"cp", "im", "om"}
