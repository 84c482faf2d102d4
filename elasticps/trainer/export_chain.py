"""Read a model export and its delta chain: the loader a serving job runs.

This file imports nothing of elasticps (numpy, safetensors and torch only; a test checks), so a
serving job may copy it as it is. An export directory holds ``manifest.json`` and a safetensors
file (see :mod:`elasticps.trainer.export` for the layout). A **full** export holds every row; a
**delta** holds the rows that changed since its parent export (new ids, or any value changed),
the ids its parent held that are gone (``sparse/T/tombstones``: evicted rows, or rows no longer
exported), and every dense value. Its manifest names the parent by path and by the SHA-256 of
the parent's ``manifest.json``, and its own weights by their SHA-256, so a delta applies only on
the exact export it was made from and a changed or truncated file is refused, never half applied.

    from export_chain import load_export
    tensors, manifest = load_export("exports/model-0003")  # base + deltas, applied in order

``tensors`` has the keys a full export's safetensors file has (dense names, and per sparse table
``sparse/T/ids`` sorted and ``sparse/T/rows``), as torch tensors. A server that already holds a
state applies each new delta with :func:`apply_link` on :func:`read_link`'s result.

What the model reads is the manifest's ``inputs`` (:func:`read_inputs`): the dense columns in
the order the model reads them, each one's normalisation, each categorical column's hashing,
the label's kind and a class label's values (:func:`class_value` maps an output index back).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

FORMAT = "elasticps.model/1"
MANIFEST = "manifest.json"
MAX_CHAIN = 10_000  # links followed before the chain is called a loop


class ExportChainError(ValueError):
    """An export or delta that cannot be applied: corrupt, not a delta of this parent, or not
    an elasticps export. The message names the directory and what is wrong."""


@dataclass(frozen=True)
class Link:
    """One export directory as read and checked: its manifest, the manifest's SHA-256 (what a
    child names as its parent) and its tensors."""

    directory: Path
    manifest: dict[str, Any]
    sha256: str
    tensors: dict[str, np.ndarray]

    @property
    def parent(self) -> dict[str, str] | None:
        parent = self.manifest.get("parent")
        return parent if isinstance(parent, dict) else None


@dataclass(frozen=True)
class State:
    """A model as applied so far: dense values, per sparse table its sorted ids and rows, and
    the link last applied (a delta must name it as its parent)."""

    manifest: dict[str, Any]
    sha256: str
    dense: dict[str, np.ndarray]
    sparse: dict[str, tuple[np.ndarray, np.ndarray]]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_link(directory: str | os.PathLike[str]) -> Link:
    """Read and check one export directory (full or delta); ExportChainError if it is corrupt."""
    where = Path(directory)
    try:
        raw = (where / MANIFEST).read_bytes()
    except OSError as exc:
        raise ExportChainError(f"{where}: no readable {MANIFEST} ({exc})") from exc
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise ExportChainError(f"{where}/{MANIFEST} is not JSON (corrupt?): {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ExportChainError(f"{where} is not an elasticps model export (format {found!r})")
    weights = where / str(manifest.get("weights", ""))
    expected = manifest.get("weights_sha256")
    if expected is None and manifest.get("kind") == "delta":
        raise ExportChainError(f"delta export {where} records no weights_sha256")
    try:
        if expected is not None and file_sha256(weights) != expected:
            raise ExportChainError(
                f"{weights} does not match the SHA-256 its manifest records: the file is corrupt "
                "or was changed after the export")
        tensors = load_file(str(weights))
    except (OSError, SafetensorError) as exc:
        raise ExportChainError(f"{weights} cannot be read: {exc}") from exc
    return Link(where, manifest, hashlib.sha256(raw).hexdigest(), tensors)


def _tensor(link: Link, key: str, dtype: type, ndim: int) -> np.ndarray:
    value = link.tensors.get(key)
    if value is None or value.dtype != dtype or value.ndim != ndim:
        found = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
        raise ExportChainError(f"{link.directory}: tensor {key!r} must be {np.dtype(dtype)} "
                               f"with {ndim} dimension(s), found {found}")
    return value


def _table(link: Link, table: str, meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    ids = _tensor(link, str(meta["ids"]), np.int64, 1)
    rows = _tensor(link, str(meta["rows"]), np.float32, 2)
    if rows.shape[0] != ids.shape[0] or (ids.size > 1 and not np.all(ids[1:] > ids[:-1])):
        raise ExportChainError(f"{link.directory}: table {table!r} must hold sorted unique ids "
                               f"and one row each, found {ids.shape[0]} ids, {rows.shape[0]} rows")
    return ids, rows


def apply_link(state: State | None, link: Link) -> State:
    """The model after ``link``: a full export replaces ``state``; a delta applies on it and
    must name it as its parent."""
    try:
        return _apply(state, link)
    except (KeyError, TypeError, AttributeError) as exc:  # a manifest that lacks a field
        raise ExportChainError(f"{link.directory}/{MANIFEST} is malformed: {exc!r:.200}") from exc


def _apply(state: State | None, link: Link) -> State:
    missing = [name for name in link.manifest.get("dense", {}) if name not in link.tensors]
    if missing:
        raise ExportChainError(f"{link.directory}: dense tensor(s) {missing} are missing")
    dense = {name: link.tensors[name] for name in link.manifest.get("dense", {})}
    tables = link.manifest.get("sparse", {})
    if link.manifest.get("kind", "full") == "full":
        sparse = {t: _table(link, t, meta) for t, meta in tables.items()}
        return State(link.manifest, link.sha256, dense, sparse)
    parent = link.parent or {}
    if state is None:
        raise ExportChainError(f"{link.directory} is a delta: it needs its parent "
                               f"{parent.get('path')!r} applied first")
    if parent.get("manifest_sha256") != state.sha256:
        raise ExportChainError(
            f"{link.directory} is a delta of the export whose manifest has SHA-256 "
            f"{parent.get('manifest_sha256')}, not of the one applied ({state.sha256}, "
            f"{state.manifest.get('meta', {}).get('export', 'unnamed')}): refusing to apply it")
    if set(tables) != set(state.sparse):
        raise ExportChainError(f"{link.directory} holds sparse tables {sorted(tables)}, its "
                               f"parent {sorted(state.sparse)}")
    sparse = {}
    for table, meta in tables.items():
        ids, rows = _table(link, table, meta)
        gone = _tensor(link, str(meta["tombstones"]), np.int64, 1)
        old_ids, old_rows = state.sparse[table]
        if rows.shape[1] != old_rows.shape[1]:
            raise ExportChainError(f"{link.directory}: table {table!r} rows are {rows.shape[1]} "
                                   f"wide, its parent's {old_rows.shape[1]}")
        unknown = gone[~np.isin(gone, old_ids)]
        if unknown.size:
            raise ExportChainError(f"{link.directory}: table {table!r} removes id "
                                   f"{int(unknown[0])}, which its parent does not hold")
        keep = ~np.isin(old_ids, np.concatenate([gone, ids]))
        merged_ids = np.concatenate([old_ids[keep], ids])
        order = np.argsort(merged_ids, kind="stable")
        sparse[table] = (merged_ids[order], np.concatenate([old_rows[keep], rows])[order])
    return State(link.manifest, link.sha256, dense, sparse)


def chain(directory: str | os.PathLike[str]) -> list[Link]:
    """The links from the base (a full export) to ``directory``, each read and checked."""
    links = [read_link(directory)]
    seen = {links[0].directory.resolve()}
    while links[-1].parent is not None:
        parent = links[-1].directory / str(links[-1].parent.get("path", ""))
        if parent.resolve() in seen or len(links) > MAX_CHAIN:
            raise ExportChainError(f"{links[-1].directory}: the parent links loop")
        seen.add(parent.resolve())
        links.append(read_link(parent))
    return links[::-1]


def advance(state: State | None, directory: str | os.PathLike[str]) -> State:
    """The model ``directory`` describes, reusing ``state`` when it lies on the chain: only
    the links after it are read and applied (a server holding version n reads n+1..m, never n
    again); otherwise the whole chain from its base, as :func:`load_state`."""
    links = [read_link(directory)]
    if state is not None and links[0].sha256 == state.sha256:
        return state
    seen = {links[0].directory.resolve()}
    while links[-1].parent is not None:
        if state is not None and links[-1].parent.get("manifest_sha256") == state.sha256:
            break  # its parent is the state held
        parent = links[-1].directory / str(links[-1].parent.get("path", ""))
        if parent.resolve() in seen or len(links) > MAX_CHAIN:
            raise ExportChainError(f"{links[-1].directory}: the parent links loop")
        seen.add(parent.resolve())
        links.append(read_link(parent))
    else:
        state = None  # not on this chain: from its base
    for link in reversed(links):
        state = apply_link(state, link)
    assert state is not None  # a chain holds at least its base
    return state


def load_state(directory: str | os.PathLike[str]) -> State:
    """The model ``directory`` describes (base + deltas applied), as numpy arrays."""
    state: State | None = None
    for link in chain(directory):
        state = apply_link(state, link)
    assert state is not None
    return state


def as_tensors(state: State) -> dict[str, Any]:
    """A full export's tensors (dense names, ``sparse/T/ids``, ``sparse/T/rows``) as torch."""
    import torch

    out = {name: torch.from_numpy(np.array(value)) for name, value in state.dense.items()}
    for table, (ids, rows) in state.sparse.items():
        out[f"sparse/{table}/ids"] = torch.from_numpy(np.array(ids))
        out[f"sparse/{table}/rows"] = torch.from_numpy(np.array(rows))
    return out


def load_export(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors, manifest) of the model ``directory`` describes, a full export or the newest
    delta of a chain: ``tensors`` as a full export's file holds them, ``manifest`` the newest
    link's with each table's ``count`` the rows it now holds."""
    state = load_state(directory)
    manifest = json.loads(json.dumps(state.manifest))
    for table, (ids, _) in state.sparse.items():
        manifest["sparse"][table].update(ids=f"sparse/{table}/ids", rows=f"sparse/{table}/rows",
                                         count=int(ids.shape[0]))
    return as_tensors(state), manifest


def read_inputs(manifest: dict[str, Any]) -> dict[str, Any]:
    """The export's ``inputs`` record, checked for what every scorer uses: ``dense`` (the dense
    columns in the order the model reads them), ``dense_columns``, ``categorical``, ``label``."""
    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict):
        raise ExportChainError("the export records no 'inputs' (what the model reads); export "
                               "it again from a model trained on a dataset")
    dense = inputs.get("dense")
    if not isinstance(dense, list) or not all(isinstance(name, str) for name in dense):
        raise ExportChainError(f"the export's inputs.dense must list column names, got "
                               f"{dense!r:.200}")
    for key in ("dense_columns", "categorical", "label"):
        if not isinstance(inputs.get(key), dict):
            raise ExportChainError(f"the export's inputs.{key} must be an object")
    missing = [name for name in dense if name not in inputs["dense_columns"]]
    if missing:
        raise ExportChainError(f"the export's inputs.dense_columns lacks {missing}")
    return inputs


def class_value(inputs: dict[str, Any], index: int) -> Any:
    """The class a model's output ``index`` stands for: ``inputs.label.values[index]``, or the
    index itself for a label whose values are indices."""
    values = inputs["label"].get("values")
    return index if values is None else values[index]
