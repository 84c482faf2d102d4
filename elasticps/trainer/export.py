"""Model export: safetensors weights plus a small JSON manifest, loadable without elasticps.

Layout of an export directory::

    model.safetensors   dense parameters by their module names ("mlp.0.weight", ...), and for
                        every sparse table T: "sparse/T/ids" int64 [n] (sorted) and
                        "sparse/T/rows" float32 [n, dim]
    manifest.json       {"format": "elasticps.model/1", "weights": "model.safetensors",
                         "dense": {name: shape}, "sparse": {T: {"dim", "count", "ids", "rows"}},
                         "modules": {module path: T},
                         "layers": {module path: {"table": T, "dim": d, "kind": "embedding",
                                                  "columns": "c" | ["c1", ...] | null}
                                              | {"table": T, "dim": d, "kind": "bag",
                                                 "column": "c", "mode": "sum" | "mean",
                                                 "weighted": bool}},
                         "schema": {...the training dataset's declared schema} | null,
                         "meta": {...whatever the exporter adds}}

``layers`` is what a scorer needs to rebuild each sparse lookup without elasticps: the table,
and the batch column(s) the layer reads (a string: ``[B, dim]``; a list of k: ``[B, k, dim]``)
or, for a bag, its column and reduction (sum or mean of the rows of the row's values, times
their weights when ``weighted``; an empty bag gives zeros). ``schema`` says how those columns
were made from raw data (hashing, normalisation). An id missing from a table's export was never
touched by training; scorers use a zero row.
Files are written to a temporary name, fsynced and renamed; the manifest goes last, so a
manifest that exists always describes complete weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

FORMAT = "elasticps.model/1"
WEIGHTS = "model.safetensors"
MANIFEST = "manifest.json"


def _fsync_replace(tmp: Path, final: Path) -> None:
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, final)


def export_model(
    directory: str | os.PathLike[str],
    dense: Mapping[str, np.ndarray],
    sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
    layers: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    *,
    schema: Mapping[str, Any] | None = None,
) -> Path:
    """Write an export of ``dense`` values and ``sparse`` (ids, rows) tables into ``directory``;
    ``layers`` maps each sparse layer's module path to its record (see the module docstring)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    for name, value in dense.items():
        tensors[name] = np.ascontiguousarray(value, dtype=np.float32)
    sparse_meta: dict[str, dict[str, Any]] = {}
    for table, (ids, rows) in sparse.items():
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        ids_key, rows_key = f"sparse/{table}/ids", f"sparse/{table}/rows"
        tensors[ids_key] = np.ascontiguousarray(ids[order])
        tensors[rows_key] = np.ascontiguousarray(np.asarray(rows, dtype=np.float32)[order])
        sparse_meta[table] = {"dim": int(tensors[rows_key].shape[1]), "count": int(ids.size),
                              "ids": ids_key, "rows": rows_key}
    tmp = out / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT})
    _fsync_replace(tmp, out / WEIGHTS)
    manifest = {
        "format": FORMAT,
        "weights": WEIGHTS,
        "dense": {name: list(np.shape(value)) for name, value in dense.items()},
        "sparse": sparse_meta,
        "modules": {path: str(layer["table"]) for path, layer in layers.items()},
        "layers": {path: dict(layer) for path, layer in layers.items()},
        "schema": None if schema is None else dict(schema),
        "meta": dict(meta or {}),
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    _fsync_replace(tmp, out / MANIFEST)
    return out
