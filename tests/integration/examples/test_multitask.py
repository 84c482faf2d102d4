"""examples/multitask: one model, three labels of three kinds (binary, float, class), one head
each with its own loss, weight and metrics, in real processes.

A CSV converted as a user would (``data convert csv --schema`` with a schema declaring the
three labels); one trainer and one pserver (Adagrad, no prefetch) end with the parameters of a
one-process PyTorch run of the same model trained on the same batches with the weighted sum of
BCE, mean squared error and cross-entropy written out by hand, and report its test metrics per
head; two trainers and two pservers (prefetch on) reach each head's test metric within a
stated tolerance of it, and show them in summary.json and on the final line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticps.data import auc, open_dataset
from tests.helpers import REPO
from tests.integration.examples.jobs import Job, Reference, cli, load_example, run_job

SCRIPT = "examples/multitask/train.py"
PASSES, BATCH, LR, SPARSE_LR, HIDDEN, ROWS = 3, 100, 0.05, 0.1, (32, 16), 20_000
WEIGHTS = {"click": 1.0, "dwell": 0.5, "topic": 1.0}
TRAIN_ARGS = ["--passes", str(PASSES), "--batch-size", str(BATCH), "--optimizer", "adagrad",
              "--lr", str(LR), "--sparse-optimizer", "adagrad", "--sparse-lr", str(SPARSE_LR),
              "--schedule", "none", "--hidden", ",".join(map(str, HIDDEN)),
              "--weights", ",".join(f"{k}={v}" for k, v in WEIGHTS.items())]
# Two asynchronous trainers against the one-process run from the same initial values (see
# test_tabular.py): in 5 runs of this job the gaps were at most 0.004 (AUC), 0.0064 (RMSE) and
# 0 (accuracy). Each tolerance is about the test set's resolution over these 2,000 rows: an AUC
# near 0.79 has a standard error of about 0.011 (Hanley & McNeil), an RMSE of 0.5 about 0.008,
# an accuracy near 0.83 about 0.008.
TOLERANCE = {"click_auc": 0.015, "dwell_rmse": 0.015, "topic_accuracy": 0.015}

mt = load_example("examples/multitask/model.py")


@dataclass
class Shop:
    root: Path
    data: Path
    test: Path
    planted: dict[str, float]


@dataclass
class Parity:
    job: Job
    reference: Reference
    metrics: dict[str, float]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    root = tmp_path_factory.mktemp("multitask")
    subprocess.run([sys.executable, str(REPO / "examples/multitask/make_data.py"), "--out",
                    str(root), "--rows", str(ROWS), "--test-rows", "2000", "--users", "300",
                    "--items", "100"], check=True, capture_output=True, timeout=120)
    # Ten tasks a pass, and enough of them that the second trainer, which joins a few seconds
    # after the first, trains too.
    cli("data", "convert", "csv", "train.csv", "--schema", "schema.yaml", "--out", "data",
        "--rows-per-chunk", "2000", cwd=root)
    cli("data", "convert", "csv", "test.csv", "--schema", "schema.yaml", "--like", "data",
        "--out", "test-data", cwd=root)
    return Shop(root, root / "data", root / "test-data",
                json.loads((root / "planted.json").read_text()))


def head_metrics(model: torch.nn.Module, test: Path) -> dict[str, float]:
    """Each head's headline metric over the test rows, computed here from the definitions."""
    outputs: dict[str, list[np.ndarray]] = {"click": [], "dwell": [], "topic": []}
    labels = []
    with torch.no_grad():
        for batch in open_dataset(str(test)).iter_batches(1000):
            out = model(batch.to_torch())
            for name in outputs:
                outputs[name].append(out[name].numpy())
            labels.append(batch.label)
    label = np.concatenate(labels)
    click, dwell, topic = (np.concatenate(outputs[n]) for n in ("click", "dwell", "topic"))
    return {"click_auc": auc(label[:, 0], 1 / (1 + np.exp(-click[:, 0]))),
            "dwell_rmse": float(np.sqrt(np.mean((dwell[:, 0] - label[:, 1]) ** 2))),
            "topic_accuracy": float(np.mean(topic.argmax(axis=1) == label[:, 2]))}


@pytest.fixture(scope="module")
def parity(shop: Shop, tmp_path_factory: pytest.TempPathFactory) -> Parity:
    workdir = tmp_path_factory.mktemp("parity") / "job"
    initial = workdir.parent / "initial.safetensors"
    job = run_job(SCRIPT, workdir, ["--data", str(shop.data), "--test-data", str(shop.test),
                                    *TRAIN_ARGS, "--no-prefetch", "--dump-initial",
                                    str(initial)], trainers=1, pservers=1)
    dataset = open_dataset(str(shop.data))
    assert dataset.schema.label_kind == "mixed"
    assert len(dataset.chunks) == 10  # handed out in order to the one trainer
    reference = Reference(initial, lambda tables: mt.MultiTaskModel(
        dataset.schema, tables.embedding, hidden=HIDDEN))
    reference.fit(lambda: dataset.iter_batches(BATCH), PASSES,
                  mt.weighted_loss(dataset.schema, WEIGHTS),
                  lambda dense, sparse: [(torch.optim.Adagrad(dense, lr=LR), None),
                                         (torch.optim.Adagrad(sparse, lr=SPARSE_LR), None)])
    return Parity(job, reference, head_metrics(reference.model, shop.test))


def test_one_trainer_with_three_heads_ends_with_the_parameters_of_local_pytorch(
        parity: Parity) -> None:
    differences = parity.reference.differences(parity.job.workdir / "model")
    print("largest |elasticps - torch| per tensor:", json.dumps(differences, indent=1))
    summary = parity.job.summary
    for name, value in parity.metrics.items():
        assert summary[name] == pytest.approx(value, abs=1e-4), name
    assert summary["samples"] == PASSES * ROWS


def test_three_heads_on_two_trainers_and_two_pservers(shop: Shop, parity: Parity,
                                                      tmp_path: Path) -> None:
    job = run_job(SCRIPT, tmp_path / "job", ["--data", str(shop.data), "--test-data",
                                             str(shop.test), *TRAIN_ARGS],
                  trainers=2, pservers=2)
    summary = job.summary
    assert summary["samples"] == PASSES * ROWS
    trained = {name: timers["forward"] > 0 for name, timers in summary["trainer_timers"].items()}
    assert len(trained) == 2, trained
    assert all(trained.values()), trained  # both trainers trained
    assert summary["headline"] == ["click_auc", "dwell_rmse", "topic_accuracy"]
    final = ", ".join(f"{name} {summary[name]:.4f}" for name in summary["headline"])
    assert f"final test {final}" in job.proc.stdout
    assert {"click_logloss", "dwell_mae", "topic_perplexity"} <= set(summary)
    print("test metrics: 2x2", {n: round(summary[n], 4) for n in TOLERANCE}, "one process",
          {n: round(v, 4) for n, v in parity.metrics.items()}, "planted", shop.planted)
    for name, tolerance in TOLERANCE.items():
        assert abs(summary[name] - parity.metrics[name]) <= tolerance, name
