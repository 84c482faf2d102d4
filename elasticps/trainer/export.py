"""Model export: safetensors weights plus a small JSON manifest, loadable without elasticps;
a later export may be a delta of an earlier one (base + deltas for serving).

Layout of an export directory::

    model.safetensors   dense parameters by their module names ("mlp.0.weight", ...), and for
                        every sparse table T: "sparse/T/ids" int64 [n] (sorted) and
                        "sparse/T/rows" float32 [n, dim]; a delta also "sparse/T/tombstones"
                        int64 [k] (sorted)
    manifest.json       {"format": "elasticps.model/1", "kind": "full" | "delta",
                         "weights": "model.safetensors", "weights_sha256": hex,
                         "parent": {"path": relative path, "manifest_sha256": hex} (delta only),
                         "inputs": {"dense": [column, ...], ...} | null,
                         "dense": {name: shape}, "sparse": {T: {"dim", "count", "ids", "rows"
                                                                [, "tombstones", "removed"]}},
                         "modules": {module path: T},
                         "layers": {module path: {"table": T, "dim": d, "kind": "embedding",
                                                  "columns": "c" | ["c1", ...] | null}
                                              | {"table": T, "dim": d, "kind": "bag",
                                                 "column": "c", "mode": "sum" | "mean",
                                                 "weighted": bool}
                                              | {"table": T, "dim": d, "kind": "sequence",
                                                 "column": "c", "max_len": L | null}},
                         "schema": {...the training dataset's declared schema} | null,
                         "meta": {...whatever the exporter adds}}

``inputs`` (:mod:`elasticps.data.model_inputs`) is what a scorer needs to make the model's
inputs from raw rows: ``dense`` lists the dense columns in the order the model reads them
(``batch.dense``'s, the schema's order), then how each dense column is normalised, how each
categorical column is hashed into its table, what the label is (its kind, a class label's
values in index order). The manifest keeps the order it is written in (schema columns, layers).

``layers`` is what a scorer needs to rebuild each sparse lookup without elasticps: the table,
and the batch column(s) the layer reads (a string: ``[B, dim]``; a list of k: ``[B, k, dim]``)
or, for a bag, its column and reduction (sum or mean of the rows of the row's values, times
their weights when ``weighted``; an empty bag gives zeros). ``schema`` says how those columns
were made from raw data (hashing, normalisation). A table holds the rows the pservers hold for
the ids exported: an id missing from it was never trained (or not admitted, or evicted);
scorers use a zero row.

A **delta** (``parent=`` a previous export directory, full or delta) holds only the rows whose
id is new or whose value changed since the parent, the parent's ids that are gone
(tombstones), and every dense value; :mod:`.export_chain` (no elasticps imports) checks each
link's parent and checksum and applies base + deltas. What changed is found against the parent
export itself, not tracked on the pservers: the parent is exactly what serving holds, so a
delta stays right across pserver restarts, restores and a trainer that died mid-export.
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

from elasticps.errors import ConfigError
from elasticps.trainer.export_chain import (
    FORMAT,
    MANIFEST,
    ExportChainError,
    State,
    file_sha256,
    load_state,
)

WEIGHTS = "model.safetensors"


def _fsync_replace(tmp: Path, final: Path) -> None:
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, final)


def _sorted(ids: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    return (np.ascontiguousarray(ids[order]),
            np.ascontiguousarray(np.asarray(rows, dtype=np.float32)[order]))


def changes(old_ids: np.ndarray, old_rows: np.ndarray, ids: np.ndarray, rows: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(mask over ``ids``: new or changed since ``old``, ``old`` ids that are gone); every
    array sorted by id. Values compare bit for bit: -0.0 and 0.0 differ, as they would served."""
    pos = np.clip(np.searchsorted(old_ids, ids), 0, max(old_ids.size - 1, 0))
    found = old_ids[pos] == ids if old_ids.size else np.zeros(ids.size, dtype=bool)
    changed = ~found
    if old_ids.size:
        changed[found] = np.any(old_rows[pos[found]].view(np.uint32)
                                != rows[found].view(np.uint32), axis=1)
    return changed, old_ids[~np.isin(old_ids, ids, assume_unique=True)]


def _parent_state(parent: Path, dense: Mapping[str, np.ndarray],
                  sparse: Mapping[str, Any]) -> State:
    try:
        state = load_state(parent)
    except ExportChainError as exc:
        raise ConfigError(f"cannot export a delta of {parent}: {exc}") from exc
    shapes = {n: list(np.shape(v)) for n, v in dense.items()}
    if state.manifest["dense"] != shapes or set(state.sparse) != set(sparse):
        raise ConfigError(
            f"cannot export a delta of {parent}: it holds dense {state.manifest['dense']} and "
            f"sparse tables {sorted(state.sparse)}, this model dense {shapes} and sparse "
            f"tables {sorted(sparse)}")
    return state


def export_model(
    directory: str | os.PathLike[str],
    dense: Mapping[str, np.ndarray],
    sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
    layers: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any] | None = None,
    *,
    schema: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Any] | None = None,
    parent: str | os.PathLike[str] | None = None,
) -> Path:
    """Write an export of ``dense`` values and ``sparse`` (ids, rows) tables into ``directory``;
    ``layers`` maps each sparse layer's module path to its record, ``inputs`` says how the
    model's inputs are made (see the module docstring). With ``parent`` (a previous export's
    directory) write a delta of it instead."""
    out = Path(directory)
    base = None if parent is None else _parent_state(Path(parent), dense, sparse)
    if base is not None and Path(parent or "").resolve() == out.resolve():
        raise ConfigError(f"a delta export cannot replace its own parent {out}")
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    for name, value in dense.items():
        tensors[name] = np.ascontiguousarray(value, dtype=np.float32)
    sparse_meta: dict[str, dict[str, Any]] = {}
    for table, (table_ids, table_rows) in sparse.items():
        ids, rows = _sorted(table_ids, table_rows)
        keys = {"ids": f"sparse/{table}/ids", "rows": f"sparse/{table}/rows"}
        record: dict[str, Any] = {"dim": int(rows.shape[1]), **keys}
        if base is not None:
            changed, gone = changes(*base.sparse[table], ids, rows)
            ids, rows = ids[changed], rows[changed]
            keys["tombstones"] = f"sparse/{table}/tombstones"
            tensors[keys["tombstones"]] = np.ascontiguousarray(gone)
            record.update(tombstones=keys["tombstones"], removed=int(gone.size))
        tensors[keys["ids"]], tensors[keys["rows"]] = ids, rows
        sparse_meta[table] = {**record, "count": int(ids.size)}
    tmp = out / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT})
    _fsync_replace(tmp, out / WEIGHTS)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "kind": "full" if base is None else "delta",
        "weights": WEIGHTS,
        "weights_sha256": file_sha256(out / WEIGHTS),
        "inputs": None if inputs is None else dict(inputs),
        "dense": {name: list(np.shape(value)) for name, value in dense.items()},
        "sparse": sparse_meta,
        "modules": {path: str(layer["table"]) for path, layer in layers.items()},
        "layers": {path: dict(layer) for path, layer in layers.items()},
        "schema": None if schema is None else dict(schema),
        "meta": dict(meta or {}),
    }
    if base is not None:
        manifest["parent"] = {"path": os.path.relpath(Path(parent or ""), out),
                              "manifest_sha256": base.sha256}
    tmp = out / (MANIFEST + ".tmp")
    # In the order written: a schema's columns and the layers keep theirs.
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    _fsync_replace(tmp, out / MANIFEST)
    return out
