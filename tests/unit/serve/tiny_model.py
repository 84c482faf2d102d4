"""A model small enough to serve in a test, whose every version scores differently: version
``v`` holds dense ``w = v`` and row ``r_i = v + i / 100`` of table ``items``, and scores a row
``sigmoid(v * x + r_item)``, so an answer's scores say which version computed them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from elasticps.data.model_inputs import model_inputs
from elasticps.data.schema import Schema
from elasticps.trainer.export import export_model
from elasticps.trainer.model_dir import Draft, VersionRecord, publish

SCHEMA = Schema.from_dict({"label": "clicked", "columns": {
    "x": {"kind": "dense", "dtype": "float", "norm": "none"},
    "item": {"kind": "categorical", "dtype": "int", "ids": "passthrough", "table": "items",
             "id_space": 50}}})
IDS = np.arange(50, dtype=np.int64)
LAYERS = {"lookup": {"table": "items", "dim": 1, "kind": "embedding", "columns": "item"}}


class Tiny(torch.nn.Module):
    def __init__(self, w: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(w.reshape(1))
        self.register_buffer("ids", ids)
        self.register_buffer("rows", rows)

    def forward(self, batch: Any) -> torch.Tensor:
        found = torch.searchsorted(self.ids, batch.ids["item"])
        return batch.dense[:, 0] * self.w + self.rows[found, 0]


def build(tensors: Mapping[str, Any], manifest: Mapping[str, Any]) -> torch.nn.Module:
    """The builder ``elasticps serve --model`` names (tests/unit/serve/tiny_model.py:build)."""
    return Tiny(torch.as_tensor(tensors["w"]), torch.as_tensor(tensors["sparse/items/ids"]),
                torch.as_tensor(tensors["sparse/items/rows"]))


def writer(value: float):  # type: ignore[no-untyped-def]
    def write(directory: Path, draft: Draft) -> None:
        rows = (value + IDS / 100.0).astype(np.float32).reshape(-1, 1)
        export_model(directory, {"w": np.full((1,), value, np.float32)},
                     {"items": (IDS, rows)}, LAYERS, draft.meta, schema=SCHEMA.to_dict(),
                     inputs=model_inputs(SCHEMA), parent=draft.parent)

    return write


def publish_version(root: Path, kind: str = "delta",
                    stream: dict[str, Any] | None = None) -> VersionRecord:
    """The next version of ``root``: its model is the one of its own number (``stream``: the
    partitions it trained through, as a stream's version records them)."""
    from elasticps.trainer.model_dir import next_draft

    value = float(next_draft(root, "full", {}).version)
    position: dict[str, Any] = {"value": value}
    if stream is not None:
        position["stream"] = stream
    return publish(root, kind, writer(value), position=position,
                   committed_at=1000.0 + value)


def expected(version: int, rows: list[dict[str, Any]]) -> list[float]:
    """What version ``version`` scores ``rows``, computed apart from the server."""
    out = []
    for row in rows:
        x = float(np.float32(row.get("x") or 0.0))
        logit = np.float32(version) * np.float32(x) + np.float32(version + row["item"] / 100.0)
        out.append(1.0 / (1.0 + math.exp(-float(np.float32(logit)))))
    return out
