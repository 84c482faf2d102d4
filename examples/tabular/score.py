"""Score a dataset with a model that ``train.py`` exported, in plain PyTorch.

    python examples/tabular/score.py --model WORKDIR/model --data TEST_DIR [--out scores.txt]

The model is rebuilt from the export alone: ``models.TabularModel`` from the export's schema and
``meta`` (model kind, hidden sizes), its dense parameters from ``model.safetensors``, and each
sparse layer from the export's ``layers`` record (its table and the batch column(s) it reads) as
a plain-PyTorch lookup (``local_layers``) over the exported rows; an id the export does not hold
was never trained and reads a zero row. Nothing of elasticps runs in the model. The rows are
read with ``elasticps.data`` (``open_dataset(...).iter_batches``): it hashes and normalises the
columns exactly as training did, from the schema stored with the data (convert the test split
``--like`` the training set so both share it); the dense columns go into the model in the order
the export's ``inputs.dense`` lists, taken by name from each batch.

Prints one JSON line: the rows scored and the label kind's metrics (``auc`` and ``logloss`` for
a binary label, and each label's ``auc_<label>`` with several, ``auc`` then their mean;
``rmse``, ``mae`` for float; ``accuracy``, ``perplexity`` for class). ``--out`` writes the
model's outputs, one row per line; for a class label, the predicted class's value (the
export's ``inputs.label.values``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_layers import LocalTables
from models import TabularModel

from elasticps.data import Batch, open_dataset
from elasticps.data.schema import Schema
from elasticps.trainer.export_chain import ExportChainError, class_value, load_export, read_inputs


class Placeholder(nn.Module):
    """Where a sparse layer goes until the export's record of it replaces it."""

    def forward(self, batch: object) -> torch.Tensor:
        raise RuntimeError("a sparse layer the export does not describe was called")


def load_model(directory: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The exported model (eval mode), and the export's manifest."""
    directory = Path(directory)
    try:  # a full export, or the newest delta of a chain (base + deltas applied)
        tensors, manifest = load_export(directory)
        return model_from_export(tensors, manifest), manifest
    except (ExportChainError, ValueError) as exc:
        raise SystemExit(f"{directory}: {exc}") from exc


def model_from_export(tensors: Mapping[str, torch.Tensor],
                      manifest: Mapping[str, Any]) -> nn.Module:
    """The model an export describes (eval mode), from its tensors (base + deltas applied)
    and its manifest; ValueError when the export does not describe one. ``elasticps serve
    MODEL_DIR --model examples/tabular/score.py:model_from_export`` builds each version with
    it."""
    if manifest.get("schema") is None:
        raise ValueError("the export records no dataset schema to build from")
    read_inputs(dict(manifest))
    meta = manifest["meta"]
    model = TabularModel(Schema.from_dict(manifest["schema"]), lambda *a: Placeholder(),
                         lambda *a: Placeholder(), kind=meta["model"],
                         hidden=tuple(meta["hidden"]))
    tables = LocalTables.from_tensors(tensors)
    for path, record in manifest["layers"].items():
        model.set_submodule(path, tables.layer(record))
    left = [path for path, module in model.named_modules() if isinstance(module, Placeholder)]
    if left:
        raise ValueError(f"the export records no sparse layer at {left}")
    dense = {name: tensors[name] for name in manifest["dense"]}
    missing, unexpected = model.load_state_dict(dense, strict=False)
    # The lookups' own buffers (ids, rows) came from the sparse tables above.
    missing = [m for m in missing if not any(m.startswith(p + ".") for p in manifest["layers"])]
    if missing or unexpected:
        raise ValueError(f"the export does not fit the model: missing {missing}, "
                         f"extra {unexpected}")
    return model.eval()


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC with average ranks for ties (Mann-Whitney); NaN with one class only."""
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]
    ranks = np.empty(s.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow: exp(-log(1 + exp(-x))), by logaddexp."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(x, dtype=np.float64)))


def metrics(kind: str, outputs: np.ndarray, labels: np.ndarray,
            names: Sequence[str] = ()) -> dict[str, float]:
    """The label kind's metrics of the model's outputs (logits, or values for float labels);
    with several labels (``names``), each one's too."""
    if kind == "binary" or kind == "multi_label":
        probs = sigmoid(outputs).reshape(len(labels), -1)
        targets = labels.reshape(len(labels), -1)
        p = np.clip(probs, 1e-7, 1 - 1e-7)
        losses = -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean(axis=0)
        aucs = [auc(targets[:, k], probs[:, k]) for k in range(targets.shape[1])]
        result = {"auc": float(np.nanmean(aucs)), "logloss": float(losses.mean())}
        if kind == "binary" and len(names) > 1:
            for k, name in enumerate(names):
                result[f"auc_{name}"], result[f"logloss_{name}"] = aucs[k], float(losses[k])
        return result
    if kind == "float":
        error = outputs.reshape(labels.shape).astype(np.float64) - labels
        result = {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(abs(error)))}
        if len(names) > 1:
            for k, name in enumerate(names):
                result[f"rmse_{name}"] = float(np.sqrt(np.mean(error[:, k] ** 2)))
                result[f"mae_{name}"] = float(np.mean(abs(error[:, k])))
        return result
    logits = outputs.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    target = labels.reshape(-1).astype(np.int64)
    cross_entropy = float(-log_probs[np.arange(target.size), target].mean())
    return {"accuracy": float(np.mean(logits.argmax(axis=1) == target)),
            "cross_entropy": cross_entropy, "perplexity": math.exp(cross_entropy)}


def in_export_order(batch: Batch, dense: Sequence[str]) -> Batch:
    """``batch`` with its dense columns in the order the export lists (``inputs.dense``),
    taken by name: data whose schema lists them in another order still scores right."""
    if tuple(dense) == batch.dense_names:
        return batch
    missing = [name for name in dense if name not in batch.dense_names]
    if missing:
        raise SystemExit(f"the data has no dense column(s) {missing} the model reads")
    order = [batch.dense_names.index(name) for name in dense]
    return dataclasses.replace(batch, dense=batch.dense[:, order], dense_names=tuple(dense))


def score(model: nn.Module, data: str | Path, inputs: Mapping[str, Any],
          batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """(outputs, labels) of every row of the dataset at ``data``, in order."""
    outputs, labels = [], []
    with torch.no_grad():
        for batch in open_dataset(str(data)).iter_batches(batch_size):
            ordered = in_export_order(batch, inputs["dense"])
            outputs.append(model(ordered.to_torch()).numpy())
            labels.append(batch.label)
    return np.concatenate(outputs), np.concatenate(labels)


def predictions(inputs: Mapping[str, Any], outputs: np.ndarray) -> list[str]:
    """One line per row: a class label's predicted value, else the outputs."""
    if inputs["label"]["kind"] == "class":
        return [str(class_value(dict(inputs), int(k))) for k in outputs.argmax(axis=1)]
    return [" ".join(f"{v:.6g}" for v in row) for row in outputs.reshape(len(outputs), -1)]


def same_encoding(export_schema: Mapping[str, Any], data: str | Path) -> bool:
    """Whether the data was made with the training data's schema (dtypes, salts, statistics)."""
    return open_dataset(str(data)).schema.to_dict() == Schema.from_dict(export_schema).to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="export directory (manifest.json)")
    parser.add_argument("--data", required=True, help="dataset directory to score")
    parser.add_argument("--out", help="write the model's outputs here, one row per line (a "
                        "class label: the predicted class's value)")
    args = parser.parse_args(argv)
    model, manifest = load_model(args.model)
    if not same_encoding(manifest["schema"], args.data):
        print(f"warning: {args.data} was not converted like the training data (its schema or "
              "statistics differ; convert it with --like TRAIN_DIR)", file=sys.stderr)
    inputs = manifest["inputs"]
    outputs, labels = score(model, args.data, inputs)
    if args.out:
        Path(args.out).write_text("".join(line + "\n" for line in predictions(inputs, outputs)))
    label = inputs["label"]
    print(json.dumps({"rows": len(labels), **metrics(label["kind"], outputs, labels,
                                                     label["names"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
