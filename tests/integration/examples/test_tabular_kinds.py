"""examples/tabular on a table with free text, a pretrained-embedding column and a DataFrame's
index: the guessed schema (text, dense_vector, ignore) converts it, the example builds its model
from it, and one trainer with Adagrad ends with the parameters of a one-process PyTorch run of
that model, whose test AUC shows it learnt from both the words and the vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from elasticps.data import auc, open_dataset
from tests.integration.examples.jobs import Reference, cli, load_example, run_job

SCRIPT = "examples/tabular/train.py"
PASSES, BATCH, LR, HIDDEN = 3, 100, 0.05, (32, 16)
TRAIN_ROWS, TEST_ROWS = 3000, 1500
VOCABULARY = [f"w{k}" for k in range(40)]

models = load_example("examples/tabular/models.py")


def reviews_table(rows: int, seed: int) -> pd.DataFrame:
    """Labels planted on the words of a review (their mean weight) and on a 4-vector."""
    rng = np.random.default_rng(seed)
    weights = np.random.default_rng(0).normal(0, 3.0, len(VOCABULARY))
    direction = np.array([1.0, -1.0, 0.5, 0.0])
    texts, logits = [], []
    vectors = rng.normal(size=(rows, 4))
    for row in range(rows):
        picked = rng.integers(0, len(VOCABULARY), rng.integers(2, 5))
        texts.append(" ".join(VOCABULARY[k] for k in picked).capitalize() + ".")
        logits.append(weights[picked].mean() + vectors[row] @ direction)
    labels = rng.random(rows) < 1 / (1 + np.exp(-np.array(logits)))
    return pd.DataFrame({"clicked": labels.astype(int), "review": texts,
                         "embedding": list(vectors),
                         "shop": rng.choice(["north", "south", "east"], rows)},
                        index=np.arange(rows) + 10_000)


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reviews")
    reviews_table(TRAIN_ROWS, 1).to_parquet(root / "train.parquet")  # with __index_level_0__
    reviews_table(TEST_ROWS, 2).to_parquet(root / "test.parquet")
    guess = cli("data", "convert", "parquet", "train.parquet", "--infer", cwd=root)
    (root / "schema.yaml").write_text(guess)
    cli("data", "convert", "parquet", "train.parquet", "--schema", "schema.yaml", "--out",
        "data", cwd=root)
    cli("data", "convert", "parquet", "test.parquet", "--schema", "schema.yaml", "--like",
        "data", "--out", "test-data", cwd=root)
    return root


def test_text_and_vectors_train_as_in_one_process_pytorch(reviews: Path) -> None:
    data = open_dataset(str(reviews / "data"))
    schema = data.schema
    assert {c.name: c.kind for c in schema.columns} == {
        "review": "text", "embedding": "dense_vector", "shop": "categorical"}
    assert schema.ignored == ("__index_level_0__",)
    assert len(data.chunks) == 5  # 3,000 rows: a task for each of up to 5 trainers

    workdir = reviews / "job"
    initial = reviews / "initial.safetensors"
    job = run_job(SCRIPT, workdir, [
        "--data", str(reviews / "data"), "--test-data", str(reviews / "test-data"),
        "--hidden", ",".join(map(str, HIDDEN)), "--optimizer", "adagrad", "--lr", str(LR),
        "--batch-size", str(BATCH), "--passes", str(PASSES), "--no-prefetch",
        "--dump-initial", str(initial)], trainers=1, pservers=1)
    reference = Reference(initial, lambda tables: models.TabularModel(
        schema, tables.embedding, tables.bag, kind="dnn", hidden=HIDDEN))
    reference.train(lambda: data.iter_batches(BATCH), PASSES, LR, torch.nn.BCEWithLogitsLoss(),
                    torch.optim.Adagrad)
    differences = reference.differences(workdir / "model")
    print("largest |elasticps - torch| per tensor:", json.dumps(differences, indent=1))
    layers = json.loads((workdir / "model" / "manifest.json").read_text())["layers"]
    assert {"kind": "bag", "column": "review", "mode": "mean"}.items() <= next(
        layer for layer in layers.values() if layer.get("column") == "review").items()

    outputs, labels = reference.outputs(open_dataset(str(reviews / "test-data"))
                                        .iter_batches(1000))
    local_auc = auc(labels, 1 / (1 + np.exp(-outputs)))
    summary = job.summary
    assert summary["auc"] == pytest.approx(local_auc, abs=1e-4)
    # The planted logits score 0.867 on these test rows, their word part alone 0.732, their
    # vector part alone 0.762 (the shop is noise): above 0.80, the model learnt from both.
    print(f"test auc {summary['auc']:.4f}")
    assert summary["auc"] > 0.80
