"""Score CTR rows with a model exported by elasticps, using only PyTorch, safetensors, numpy
and pyarrow (elasticps is NOT imported: this is what a serving job would run).

    python examples/ctr/score.py --model WORKDIR/model --data WORKDIR/data/test [--out scores.csv]

The export (``manifest.json`` + ``model.safetensors``) holds the dense parameters, the trained
rows of each sparse table with their ids, which batch columns each sparse layer reads
(``layers``: the lookups are rebuilt from it), the model's constructor options, and the feature
transform (hashed id space and dense normalisation), which this file re-implements exactly: ids
are one splitmix64 step of ``(slot << 33) | value`` (missing value = 2**32) modulo the id space.
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
from models import NUM_DENSE, SLOTS, build

DENSE_COLUMNS = [f"I{i}" for i in range(1, NUM_DENSE + 1)]
DENSE_MIN = np.array([0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.float32)
DENSE_MAX = np.array([20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50], dtype=np.float32)
_M64 = (1 << 64) - 1


@dataclass
class Rows:
    """Featurized rows, shaped like the batches the model trained on: ``dense`` [n, 13] and one
    id column per slot in ``ids``."""

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


def featurize(table, id_space: int, dense_norm: str) -> Rows:
    """Raw Criteo-schema columns -> the model's input: dense float32 [n, 13], one int64 [n] id
    column per slot."""
    n = table.num_rows
    dense = np.zeros((n, NUM_DENSE), dtype=np.float32)
    dense_missing = np.zeros((n, NUM_DENSE), dtype=bool)
    for j, name in enumerate(DENSE_COLUMNS):
        col = table.column(name)
        dense_missing[:, j] = col.is_null().to_numpy(zero_copy_only=False)
        dense[:, j] = col.fill_null(0).to_numpy().astype(np.float32)
    if dense_norm == "minmax":
        dense = (np.clip(dense, DENSE_MIN, DENSE_MAX) - DENSE_MIN) / (DENSE_MAX - DENSE_MIN)
    elif dense_norm in ("log", "log-missing"):
        dense = np.log1p(np.maximum(dense, 0.0))
    dense[dense_missing] = -1.0 if dense_norm == "log-missing" else 0.0
    ids = {}
    for j, name in enumerate(SLOTS):
        col = table.column(name)
        values = col.fill_null(0).to_numpy().astype(np.uint64)
        values[col.is_null().to_numpy(zero_copy_only=False)] = np.uint64(1 << 32)
        keys = values | (np.uint64(j) << np.uint64(33))
        ids[name] = torch.from_numpy((splitmix64(keys) % np.uint64(id_space)).astype(np.int64))
    return Rows(torch.from_numpy(dense.astype(np.float32)), ids)


def parquet_files(data: Path) -> list[Path]:
    """The dataset's own Parquet parts (not those of a split in a subdirectory)."""
    return sorted(data.glob("part-*.parquet"))


def score(model: nn.Module, manifest: dict, data: Path,
          batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, labels) for every row of the Parquet files under ``data``."""
    features = manifest["meta"]["features"]
    probs, labels = [], []
    for path in parquet_files(data):
        table = pq.read_table(path)
        rows = featurize(table, features["id_space"], features["dense_norm"])
        with torch.no_grad():
            for i in range(0, table.num_rows, batch_size):
                logits = model(rows.slice(i, i + batch_size))
                probs.append(torch.sigmoid(logits).numpy())
        labels.append(table.column("label").to_numpy().astype(np.float32))
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
