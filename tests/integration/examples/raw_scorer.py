"""A scorer as a user with an export and a raw CSV writes it: nothing of elasticps imported.

    python raw_scorer.py EXPORT_DIR TEST.csv [--alphabetical]

It loads the export with ``export_chain.py`` copied beside it (the loader a serving job copies),
rebuilds ``examples/tabular``'s ``dnn`` model from the manifest (each ``fields.lookups.<i>``
layer's record, the ``deep.<i>`` linear layers with ReLU between), makes the model's inputs from
the CSV's raw text by the export's ``inputs`` record alone (dense columns in ``inputs.dense``
order, normalised by their record; categorical values hashed by the formula the record states;
the label read as ``inputs.label`` says), and prints one JSON line: the rows, and ``auc`` for a
binary label or ``accuracy`` (the predicted class's value against the CSV's) for a class label.
``--alphabetical`` feeds the dense columns in alphabetical order instead: what a scorer that
guessed the order would do. It exits 1 if anything imported elasticps.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from export_chain import class_value, load_export, read_inputs  # copied beside this file

MASK64 = (1 << 64) - 1


def splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def category_id(text: str | None, record: dict[str, Any]) -> int:
    if text is None:
        u = 1 << 32
    elif record["dtype"] == "string":
        u = fnv1a64(text.encode())
    else:
        v = int(float(text))
        u = v if 0 <= v < 1 << 32 else splitmix64(v & MASK64)
    return splitmix64(((record["salt"] << 33) ^ u) & MASK64) % record["id_space"]


def normalised(text: str | None, record: dict[str, Any]) -> float:
    if text is None:
        return float(record["missing_value"])
    x = float(text)
    norm = record["norm"]
    if norm == "standard":
        x -= record["mean"]
        x = x / record["std"] if record["std"] > 0 else x
    elif norm == "minmax":
        lo, hi = record["min"], record["max"]
        x = (min(max(x, lo), hi) - lo) / (hi - lo) if hi > lo else 0.0
    elif norm == "log":
        x = math.log1p(max(x, 0.0))
    return x


def value(row: dict[str, str], name: str, missing: list[str]) -> str | None:
    text = row[name].strip()
    return None if text in missing else text


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (pos.size * neg.size))


def model_output(tensors: dict[str, Any], manifest: dict[str, Any], dense: torch.Tensor,
                 ids: dict[str, torch.Tensor]) -> torch.Tensor:
    fields = []
    lookups = sorted((int(p.rsplit(".", 1)[1]), r) for p, r in manifest["layers"].items()
                     if p.startswith("fields.lookups."))
    for _, record in lookups:
        if record["kind"] != "embedding":
            raise SystemExit("this scorer rebuilds single-valued lookups only")
        table_ids = tensors[f"sparse/{record['table']}/ids"]
        rows = torch.cat([tensors[f"sparse/{record['table']}/rows"],
                          torch.zeros(1, record["dim"])])
        for column in record["columns"]:
            pos = torch.searchsorted(table_ids, ids[column]).clamp(max=len(table_ids) - 1)
            found = table_ids[pos] == ids[column]
            fields.append(rows[torch.where(found, pos, torch.full_like(pos, len(table_ids)))])
    x = torch.cat([dense, *fields], dim=1)
    layers = sorted(int(name.split(".")[1]) for name in manifest["dense"]
                    if name.startswith("deep.") and name.endswith(".weight"))
    for k, index in enumerate(layers):
        x = torch.nn.functional.linear(x, tensors[f"deep.{index}.weight"],
                                       tensors[f"deep.{index}.bias"])
        if k < len(layers) - 1:
            x = torch.relu(x)
    return x.squeeze(1) if x.shape[1] == 1 else x


def main() -> int:
    export_dir, data = sys.argv[1], sys.argv[2]
    tensors, manifest = load_export(export_dir)
    inputs = read_inputs(manifest)
    rows = list(csv.DictReader(Path(data).read_text().splitlines()))
    order = sorted(inputs["dense"]) if "--alphabetical" in sys.argv else inputs["dense"]
    missing = inputs["missing"]
    dense = torch.tensor([[normalised(value(r, n, missing), inputs["dense_columns"][n])
                           for n in order] for r in rows], dtype=torch.float64).float()
    ids = {name: torch.tensor([category_id(value(r, name, missing), record) for r in rows])
           for name, record in inputs["categorical"].items()}
    with torch.no_grad():
        out = model_output(tensors, manifest, dense, ids).numpy()
    label = inputs["label"]
    truth = [r[label["names"][0]].strip() for r in rows]
    result: dict[str, Any] = {"rows": len(rows)}
    if label["kind"] == "binary":
        ones = {w.lower() for w in inputs["binary_words"]["1"]}
        result["auc"] = auc(np.array([t.lower() in ones for t in truth], dtype=np.float64),
                            out.astype(np.float64))  # logits rank as probabilities do
    else:
        predicted = [str(class_value(inputs, int(k))) for k in out.argmax(axis=1)]
        result["accuracy"] = float(np.mean([p == t for p, t in zip(predicted, truth,
                                                                    strict=True)]))
        result["first_predictions"] = predicted[:5]
    print(json.dumps(result))
    return 1 if any(name.split(".")[0] == "elasticps" for name in sys.modules) else 0


if __name__ == "__main__":
    sys.exit(main())
