"""Score CTR rows with a model exported by elasticps, using only PyTorch, safetensors, numpy
and pyarrow (elasticps is NOT imported: this is what a serving job would run).

    python examples/ctr/score.py --model WORKDIR/model --data WORKDIR/data/test [--out scores.csv]

The export (``manifest.json`` + ``model.safetensors``) holds the dense parameters, the trained
rows of each sparse table with their ids, which batch columns each sparse layer reads
(``layers``: the lookups are rebuilt from it), the model's constructor options, and what the
model reads (``inputs``): the dense columns in the order the model reads them, each one's
normalisation and statistics, each categorical column's salt and id space, the label column.
This file re-implements the transform exactly from that record: a dense value is normalised as
its ``norm`` says (in float32, as the reader does for 32-bit columns), a missing one becomes
``missing_value``; an id is ``splitmix64((salt << 33) XOR u) mod id_space`` with ``u`` the
integer value (``2**32`` when missing; ``splitmix64(v)`` for an integer outside [0, 2**32)).
Ids absent from the export were never trained; they get a zero row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from safetensors.torch import load_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import build

MISSING_KEY = 1 << 32


@dataclass
class Rows:
    """Featurized rows, shaped like the batches the model trained on: ``dense`` [n, D] in the
    export's ``inputs.dense`` order and one id column per categorical column in ``ids``."""

    dense: torch.Tensor
    ids: dict[str, torch.Tensor]

    def slice(self, start: int, stop: int) -> Rows:
        return Rows(self.dense[start:stop], {k: v[start:stop] for k, v in self.ids.items()})


class LookupEmbedding(nn.Module):
    """A frozen sparse table: sorted ids and their rows; unknown ids read a zero row. Reads the
    batch columns the export recorded for the layer: one name -> [B, dim], a list -> [B, k, dim]."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor, columns: str | Sequence[str]) -> None:
        super().__init__()
        self.columns = columns
        self.register_buffer("ids", ids.to(torch.int64))
        padded = torch.cat([rows.to(torch.float32), torch.zeros(1, rows.shape[1])])
        self.register_buffer("rows", padded)

    def forward(self, batch: Rows) -> torch.Tensor:
        if isinstance(self.columns, str):
            ids = batch.ids[self.columns]
        else:
            ids = torch.stack([batch.ids[c] for c in self.columns], dim=1)
        flat = ids.reshape(-1)
        n = self.ids.numel()
        if n == 0:
            return self.rows[torch.zeros_like(flat)].view(*ids.shape, -1)
        pos = torch.searchsorted(self.ids, flat).clamp(max=n - 1)
        index = torch.where(self.ids[pos] == flat, pos, torch.full_like(pos, n))
        return self.rows[index].view(*ids.shape, -1)


def load_model(directory: str | Path) -> tuple[nn.Module, dict]:
    """The exported model, ready for ``model(rows)``; and its manifest."""
    directory = Path(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    if manifest.get("format") != "elasticps.model/1":
        raise SystemExit(f"{directory} is not an elasticps model export (format "
                         f"{manifest.get('format')!r})")
    tensors = load_file(str(directory / manifest["weights"]))
    meta = manifest["meta"]
    # The model's sparse layers are placeholders, replaced below by lookups built from the
    # export's record of each layer (its table and the columns it reads).
    model = build(meta["model"], lambda table, dim, columns: nn.Identity(),
                  embedding_dim=meta["embedding_dim"], hidden=tuple(meta["hidden"]))
    for path, layer in manifest["layers"].items():
        table = manifest["sparse"].get(layer["table"])
        if table is None or layer.get("kind") != "embedding":
            raise SystemExit(f"layer {path!r}: no exported table {layer['table']!r}, or not an "
                             f"embedding ({layer.get('kind')!r})")
        model.set_submodule(path, LookupEmbedding(tensors[table["ids"]], tensors[table["rows"]],
                                                  layer["columns"]))
    left = [p for p, m in model.named_modules() if isinstance(m, nn.Identity)]
    if left:
        raise SystemExit(f"the export records no sparse layer at {left}")
    dense = {name: tensors[name] for name in manifest["dense"]}
    missing, unexpected = model.load_state_dict(dense, strict=False)
    missing = [m for m in missing if not m.endswith((".ids", ".rows"))]
    if missing or unexpected:
        raise SystemExit(f"export does not fit the model: missing {missing}, extra {unexpected}")
    return model.eval(), manifest


def splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def normalize(x: np.ndarray, column: dict) -> np.ndarray:
    """A dense column's values as its export record says (``inputs.dense_columns``)."""
    work = np.float32 if x.dtype.itemsize <= 4 else np.float64
    x = x.astype(work)
    norm = column["norm"]
    if norm == "standard":
        x = x - work(column["mean"])
        return x / work(column["std"]) if column["std"] > 0 else x
    if norm == "minmax":
        low, high = work(column["min"]), work(column["max"])
        return (np.clip(x, low, high) - low) / (high - low) if high > low else np.zeros_like(x)
    if norm == "log":
        return np.log1p(np.maximum(x, work(0.0)))
    if norm == "none":
        return x
    raise SystemExit(f"unknown dense norm {norm!r} in the export")


def hashed_ids(col, column: dict) -> np.ndarray:
    """int64 ids of an integer categorical column (hex32 values are the integers they spell)."""
    if column["dtype"] not in ("hex32", "int", "int32"):
        raise SystemExit(f"this scorer hashes integer columns; the export's is {column['dtype']}")
    missing = col.is_null().to_numpy(zero_copy_only=False)
    values = col.fill_null(0).to_numpy().astype(np.int64)
    if column["ids"] == "passthrough":
        return values
    small = (values >= 0) & (values < (1 << 32))
    keys = np.where(small, values.astype(np.uint64), splitmix64(values.astype(np.uint64)))
    keys[missing] = np.uint64(MISSING_KEY)
    keys ^= np.uint64(column["salt"]) << np.uint64(33)
    return (splitmix64(keys) % np.uint64(column["id_space"])).astype(np.int64)


def featurize(table, inputs: dict) -> Rows:
    """Raw columns -> the model's input: dense float32 [n, D] in ``inputs.dense`` order, one
    int64 [n] id column per categorical column."""
    dense = np.zeros((table.num_rows, len(inputs["dense"])), dtype=np.float32)
    for j, name in enumerate(inputs["dense"]):
        record = inputs["dense_columns"][name]
        col = table.column(name)
        missing = col.is_null().to_numpy(zero_copy_only=False)
        dense[:, j] = normalize(col.fill_null(0).to_numpy(), record)
        dense[missing, j] = record["missing_value"]
    ids = {name: torch.from_numpy(hashed_ids(table.column(name), record))
           for name, record in inputs["categorical"].items()}
    return Rows(torch.from_numpy(dense), ids)


def parquet_files(data: Path) -> list[Path]:
    """The dataset's own Parquet parts (not those of a split in a subdirectory)."""
    return sorted(data.glob("part-*.parquet"))


def score(model: nn.Module, manifest: dict, data: Path,
          batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, labels) for every row of the Parquet files under ``data``."""
    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict):
        raise SystemExit("the export records no inputs (what the model reads)")
    label = inputs["label"]["names"][0]
    probs, labels = [], []
    for path in parquet_files(data):
        table = pq.read_table(path)
        rows = featurize(table, inputs)
        with torch.no_grad():
            for i in range(0, table.num_rows, batch_size):
                logits = model(rows.slice(i, i + batch_size))
                probs.append(torch.sigmoid(logits).numpy())
        labels.append(table.column(label).to_numpy().astype(np.float32))
    return np.concatenate(probs), np.concatenate(labels)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC with average ranks for ties (Mann-Whitney)."""
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]
    ranks = np.empty(s.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="export directory (manifest.json)")
    parser.add_argument("--data", required=True, help="dataset directory of Parquet files")
    parser.add_argument("--out", help="write one probability per line to this file")
    args = parser.parse_args(argv)
    model, manifest = load_model(args.model)
    probs, labels = score(model, manifest, Path(args.data))
    if args.out:
        np.savetxt(args.out, probs, fmt="%.6f")
    print(json.dumps({"rows": int(probs.size), "auc": auc(labels, probs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
