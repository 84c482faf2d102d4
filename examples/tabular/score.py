"""Score a dataset with a model that ``train.py`` exported, in plain PyTorch.

    python examples/tabular/score.py --model WORKDIR/model --data TEST_DIR [--out scores.txt]

The model is rebuilt from the export alone: ``models.TabularModel`` from the export's schema and
``meta`` (model kind, hidden sizes), its dense parameters from ``model.safetensors``, and each
sparse layer from the export's ``layers`` record (its table and the batch column(s) it reads) as
a plain-PyTorch lookup (``local_layers``) over the exported rows; an id the export does not hold
was never trained and reads a zero row. Nothing of elasticps runs in the model. The rows are
read with ``elasticps.data`` (``open_dataset(...).iter_batches``): it hashes and normalises the
columns exactly as training did, from the schema stored with the data (convert the test split
``--like`` the training set so both share it).

Prints one JSON line: the rows scored and the label kind's metrics (``auc`` and ``logloss`` for
a binary label; ``rmse``, ``mae`` for float; ``accuracy``, ``perplexity`` for class).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_layers import LocalTables
from models import TabularModel

from elasticps.data import open_dataset
from elasticps.data.schema import Schema
from elasticps.trainer.export_chain import ExportChainError, load_export


class Placeholder(nn.Module):
    """Where a sparse layer goes until the export's record of it replaces it."""

    def forward(self, batch: object) -> torch.Tensor:
        raise RuntimeError("a sparse layer the export does not describe was called")


def load_model(directory: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The exported model (eval mode), and the export's manifest."""
    directory = Path(directory)
    try:  # a full export, or the newest delta of a chain (base + deltas applied)
        tensors, manifest = load_export(directory)
    except ExportChainError as exc:
        raise SystemExit(str(exc)) from exc
    if manifest.get("schema") is None:
        raise SystemExit(f"{directory}: the export records no dataset schema to build from")
    meta = manifest["meta"]
    model = TabularModel(Schema.from_dict(manifest["schema"]), lambda *a: Placeholder(),
                         lambda *a: Placeholder(), kind=meta["model"],
                         hidden=tuple(meta["hidden"]))
    tables = LocalTables.from_tensors(tensors)
    for path, record in manifest["layers"].items():
        model.set_submodule(path, tables.layer(record))
    left = [path for path, module in model.named_modules() if isinstance(module, Placeholder)]
    if left:
        raise SystemExit(f"the export records no sparse layer at {left}")
    dense = {name: tensors[name] for name in manifest["dense"]}
    missing, unexpected = model.load_state_dict(dense, strict=False)
    # The lookups' own buffers (ids, rows) came from the sparse tables above.
    missing = [m for m in missing if not any(m.startswith(p + ".") for p in manifest["layers"])]
    if missing or unexpected:
        raise SystemExit(f"the export does not fit the model: missing {missing}, "
                         f"extra {unexpected}")
    return model.eval(), manifest


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


def metrics(kind: str, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The label kind's metrics of the model's outputs (logits, or values for float labels)."""
    if kind == "binary" or kind == "multi_label":
        probs = 1.0 / (1.0 + np.exp(-outputs.astype(np.float64)))
        p = np.clip(probs, 1e-7, 1 - 1e-7)
        logloss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
        if kind == "binary":
            return {"auc": auc(labels.reshape(-1), probs.reshape(-1)), "logloss": logloss}
        per_class = [auc(labels[:, k], probs[:, k]) for k in range(labels.shape[1])]
        return {"auc": float(np.nanmean(per_class)), "logloss": logloss}
    if kind == "float":
        error = outputs.reshape(labels.shape).astype(np.float64) - labels
        return {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(abs(error)))}
    logits = outputs.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    target = labels.reshape(-1).astype(np.int64)
    cross_entropy = float(-log_probs[np.arange(target.size), target].mean())
    return {"accuracy": float(np.mean(logits.argmax(axis=1) == target)),
            "cross_entropy": cross_entropy, "perplexity": math.exp(cross_entropy)}


def score(model: nn.Module, data: str | Path, batch_size: int = 8192
          ) -> tuple[np.ndarray, np.ndarray]:
    """(outputs, labels) of every row of the dataset at ``data``, in order."""
    outputs, labels = [], []
    with torch.no_grad():
        for batch in open_dataset(str(data)).iter_batches(batch_size):
            outputs.append(model(batch.to_torch()).numpy())
            labels.append(batch.label)
    return np.concatenate(outputs), np.concatenate(labels)


def same_encoding(export_schema: Mapping[str, Any], data: str | Path) -> bool:
    """Whether the data was made with the training data's schema (dtypes, salts, statistics)."""
    return open_dataset(str(data)).schema.to_dict() == Schema.from_dict(export_schema).to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="export directory (manifest.json)")
    parser.add_argument("--data", required=True, help="dataset directory to score")
    parser.add_argument("--out", help="write the model's outputs here, one row per line")
    args = parser.parse_args(argv)
    model, manifest = load_model(args.model)
    if not same_encoding(manifest["schema"], args.data):
        print(f"warning: {args.data} was not converted like the training data (its schema or "
              "statistics differ; convert it with --like TRAIN_DIR)", file=sys.stderr)
    outputs, labels = score(model, args.data)
    if args.out:
        np.savetxt(args.out, outputs.reshape(len(outputs), -1), fmt="%.6g")
    kind = Schema.from_dict(manifest["schema"]).label_kind
    print(json.dumps({"rows": len(labels), **metrics(kind, outputs, labels)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
