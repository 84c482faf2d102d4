"""The checkpoint file format (version 1): a safetensors file, written as a stream.

A checkpoint of shard ``i`` of ``N`` is one safetensors file (an 8-byte little-endian header
length, a JSON header naming every tensor's dtype, shape and byte range, then the raw tensor
bytes; no code is ever executed to read it). Tensors:

====================================  ==========================================
``dense.<table>.value``               float32 [slice]  this shard's slice
``dense.<table>.slot.<slot>``         float32 [slice]  optimizer state
``sparse.<table>.ids``                int64 [rows]     ids, in row order
``sparse.<table>.value``              float32 [rows, dim]
``sparse.<table>.slot.<slot>``        float32 [rows, dim]
``sparse.<table>.steps``              int32 [rows]     per-row Adam steps ([0] otherwise)
``applied.tasks``                     int64 [k, 3]     (pass, task, below)
``applied.extra``                     int64 [m, 3]     (pass, task, seq) above the watermark
``applied.counts``                    int64 [k, 3]     (pass, task, applications); optional
``applied.floor``                     int64 [1]        passes below it were pruned; optional
``sparse.<table>.tombstones``         int64 [k]        a delta's ids evicted since its parent
``sparse.<table>.touched_pass``       int32 [rows]     pass of each row's last push; optional
``sparse.<table>.pushed_unix``        float64 [rows]   unix time of its last push; optional
``sparse.<table>.hits``               uint32 [rows]    its push count; optional
``sparse.<table>.sketch``             uint16 [4, w]    the admission sketch's counters; optional
``sparse.<table>.sketch_aging``       int64 [1]        pushes counted since it last halved
``sparse.<table>.shows``              float32 [rows]   SCORE: show count as of score_pass
``sparse.<table>.clicks``             float32 [rows]   SCORE: click count as of score_pass
``sparse.<table>.score_pass``         int32 [rows]     SCORE: the pass its counts are as of
``legacy.<k>.<i>.tasks|extra|floor``  int64            what shard i of earlier layout k had
                                                       applied at a resharding (as applied.*)
====================================  ==========================================

Metadata ``legacy_shards`` ([N_0, N_1, ...], optional) gives each earlier layout's shard count
(reshard/lineage.py); a file without it comes from a job never resharded.

The optional per-row tensors are written for tables that evict (the eviction bookkeeping), the
sketch for tables that admit after k pushes, the show/click counts for tables that evict by
score; a file without them restores rows as pushed (and shown) once, at restore time, and an
empty sketch (what older files meant).

A **delta** (an incremental checkpoint, :mod:`.delta`) has the same layout; its
metadata holds ``delta: {"parent": "<id>"}``, its sparse tensors hold only the rows pushed since
that parent, and its tombstones the ids evicted since.

The two optional tensors were added for exactly-once accounting (docs/fault-tolerance.md); a
file without them reads as "each batch applied once" and floor 0, so version 1 still holds.

The header's ``__metadata__`` holds one key, ``elasticps``, whose value is a JSON object:
``format`` (``"elasticps.pserver.checkpoint.files"``), ``version`` (1), ``id``, ``shard``,
``num_shards``, ``created_unix``, ``initialized``, ``tables`` (the TableSpecs as proto JSON),
``dense_steps`` ({table: step}) and ``counters``. The file's sha256 lives in a separate manifest
(see :mod:`elasticps.pserver.checkpoint.files`), so the data file is never rewritten after the fact.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
from google.protobuf import json_format

from elasticps.errors import CheckpointError, shown
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint.snapshot import (
    DenseState,
    RowBookkeeping,
    RowScores,
    ShardSnapshot,
    SparseState,
)
from elasticps.pserver.reshard.lineage import LegacyLayout

FORMAT = "elasticps.pserver.checkpoint.files"
MAX_LEGACY_SHARDS = 1000
VERSION = 1
_DTYPES: dict[np.dtype[Any], str] = {
    np.dtype("<f4"): "F32", np.dtype("<i8"): "I64", np.dtype("<i4"): "I32",
    np.dtype("<f8"): "F64", np.dtype("<u4"): "U32", np.dtype("<u2"): "U16",
}
_FROM_CODE: dict[str, np.dtype[Any]] = {code: dtype for dtype, code in _DTYPES.items()}


def snapshot_tensors(snap: ShardSnapshot) -> dict[str, np.ndarray]:
    """The named arrays of a snapshot, in a stable order."""
    tensors: dict[str, np.ndarray] = {}
    for name, dense in snap.dense.items():
        tensors[f"dense.{name}.value"] = dense.values
        for slot, arr in dense.slots.items():
            tensors[f"dense.{name}.slot.{slot}"] = arr
    for name, sparse in snap.sparse.items():
        tensors[f"sparse.{name}.ids"] = sparse.ids
        tensors[f"sparse.{name}.value"] = sparse.values
        for slot, arr in sparse.slots.items():
            tensors[f"sparse.{name}.slot.{slot}"] = arr
        tensors[f"sparse.{name}.steps"] = sparse.steps
        book = sparse.bookkeeping
        if book is not None:
            if book.hits.shape[0] == sparse.ids.shape[0]:
                tensors[f"sparse.{name}.touched_pass"] = book.touched_pass
                tensors[f"sparse.{name}.pushed_unix"] = book.pushed_unix
                tensors[f"sparse.{name}.hits"] = book.hits
            if book.scores is not None and book.scores.shows.shape[0] == sparse.ids.shape[0]:
                tensors[f"sparse.{name}.shows"] = book.scores.shows
                tensors[f"sparse.{name}.clicks"] = book.scores.clicks
                tensors[f"sparse.{name}.score_pass"] = book.scores.score_pass
            if book.sketch is not None:
                tensors[f"sparse.{name}.sketch"] = book.sketch
                tensors[f"sparse.{name}.sketch_aging"] = np.array([book.sketch_aging],
                                                                  dtype=np.int64)
        if snap.delta:
            tensors[f"sparse.{name}.tombstones"] = snap.tombstones.get(
                name, np.zeros(0, dtype=np.int64))
    tasks, extra = snap.applied.to_arrays()
    tensors["applied.tasks"] = tasks
    tensors["applied.extra"] = extra
    tensors["applied.counts"] = snap.applied.counts_array()
    tensors["applied.floor"] = np.array([snap.applied.floor], dtype=np.int64)
    for k, layout in enumerate(snap.legacy):
        for i, applied in enumerate(layout.applied):
            tasks, extra = applied.to_arrays()
            tensors[f"legacy.{k}.{i}.tasks"] = tasks
            tensors[f"legacy.{k}.{i}.extra"] = extra
            tensors[f"legacy.{k}.{i}.floor"] = np.array([applied.floor], dtype=np.int64)
    return tensors


def snapshot_metadata(snap: ShardSnapshot, checkpoint_id: str,
                      parent: str = "") -> dict[str, Any]:
    optional: dict[str, Any] = {"delta": {"parent": parent}} if parent else {}
    if snap.legacy:
        optional["legacy_shards"] = [layout.num_shards for layout in snap.legacy]
    return {**optional,
        "format": FORMAT,
        "version": VERSION,
        "id": checkpoint_id,
        "shard": snap.shard,
        "num_shards": snap.num_shards,
        "created_unix": time.time(),
        "initialized": snap.initialized,
        "tables": [json_format.MessageToDict(spec) for spec in snap.specs],
        "dense_steps": {name: d.step for name, d in snap.dense.items()},
        "counters": snap.counters,
    }


def _header(tensors: dict[str, np.ndarray], metadata: dict[str, Any]) -> bytes:
    entries: dict[str, Any] = {"__metadata__": {"elasticps": json.dumps(metadata, sort_keys=True)}}
    offset = 0
    for name, arr in tensors.items():
        entries[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                         "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors aligns the data section to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


def write_stream(
    out: BinaryIO, tensors: dict[str, np.ndarray], metadata: dict[str, Any]
) -> tuple[int, str]:
    """Write a safetensors file to ``out`` without building it in memory; returns
    (bytes written, sha256 hex)."""
    digest = hashlib.sha256()
    size = 0
    for chunk in _chunks(tensors, metadata):
        out.write(chunk)
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()


def _chunks(
    tensors: dict[str, np.ndarray], metadata: dict[str, Any]
) -> Iterator[bytes | memoryview]:
    yield _header(tensors, metadata)
    for arr in tensors.values():
        contiguous = np.ascontiguousarray(arr)
        if contiguous.nbytes:
            yield contiguous.reshape(-1).view(np.uint8).data


MAX_HEADER_BYTES = 100 << 20  # safetensors' own bound on the JSON header
MAX_DIMS = 8


def _check_header(header: object, size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, tensor entries) of a parsed header, every field type-checked."""
    if not isinstance(header, dict):
        raise ValueError(f"the header is a {type(header).__name__}, not an object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or not isinstance(meta.get("elasticps"), str):
        raise ValueError("the header has no __metadata__.elasticps string")
    metadata = json.loads(meta["elasticps"])
    if not isinstance(metadata, dict):
        raise ValueError("__metadata__.elasticps is not a JSON object")
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise ValueError(f"tensor {shown(name)} is described by a {type(entry).__name__}")
        offsets, shape = entry.get("data_offsets"), entry.get("shape")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(type(o) is int for o in offsets)):
            raise ValueError(f"tensor {shown(name)} has data_offsets {shown(offsets)}")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
                and all(type(d) is int and 0 <= d <= size for d in shape)):
            raise ValueError(f"tensor {shown(name)} has shape {shown(shape)}")
        if entry.get("dtype") not in _FROM_CODE:
            raise ValueError(f"tensor {shown(name)} has dtype {shown(entry.get('dtype'))}")
    return metadata, header


def parse(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, tensors) of a checkpoint file; CheckpointError if it is not one.

    Everything read from the file is checked before it is used: the header is an object of
    tensor entries with integer offsets inside the file, a shape of at most 8 non-negative
    dimensions whose element count matches the byte range, and a known dtype.
    """
    try:
        (header_len,) = struct.unpack_from("<Q", data, 0)
        if header_len > min(len(data) - 8, MAX_HEADER_BYTES):
            raise ValueError(f"header length {header_len} exceeds the file ({len(data)} bytes)")
        metadata, header = _check_header(json.loads(data[8 : 8 + header_len]), len(data))
        base = 8 + header_len
        tensors: dict[str, np.ndarray] = {}
        for name, entry in header.items():
            start, stop = entry["data_offsets"]
            if not 0 <= start <= stop <= len(data) - base:
                raise ValueError(f"tensor {name} lies outside the file")
            dtype = _FROM_CODE[entry["dtype"]]
            count = (stop - start) // dtype.itemsize
            if count * dtype.itemsize != stop - start or count != math.prod(entry["shape"]):
                raise ValueError(f"tensor {name} has {stop - start} bytes for shape "
                                 f"{entry['shape']}")
            tensors[name] = np.frombuffer(
                data, dtype=dtype, count=count, offset=base + start
            ).reshape(entry["shape"])
    except _READ_ERRORS as exc:
        raise CheckpointError(f"not an elasticps checkpoint file: {exc!s:.200}") from exc
    _check_format(metadata)
    return metadata, tensors


def _check_format(metadata: dict[str, Any]) -> None:
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint format {shown(metadata.get('format'))} version "
            f"{shown(metadata.get('version'))} is not {FORMAT!r} version {VERSION}"
        )


_READ_ERRORS = (ValueError, KeyError, TypeError, struct.error, RecursionError,
                UnicodeDecodeError)


def read_stream(handle: BinaryIO, size: int) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """(metadata, tensors, sha256 hex of all ``size`` bytes) of a checkpoint file, read from
    ``handle`` once: each tensor goes straight into its own array, so a restore never holds a
    copy of the whole file. Checked as :func:`parse` checks (tensors must not overlap); the
    caller compares the digest before anything read is used."""
    digest = hashlib.sha256()

    def read(count: int) -> bytes:
        data = handle.read(count)
        if len(data) != count:
            raise ValueError(f"the file ends {count - len(data)} bytes early (truncated)")
        digest.update(data)
        return data

    def read_into(view: memoryview) -> None:
        done = 0
        while done < len(view):
            got = handle.readinto(view[done:])  # type: ignore[attr-defined]
            if not got:
                raise ValueError(f"the file ends {len(view) - done} bytes early (truncated)")
            done += got
        digest.update(view)

    try:
        (header_len,) = struct.unpack("<Q", read(8))
        if header_len > min(size - 8, MAX_HEADER_BYTES):
            raise ValueError(f"header length {header_len} exceeds the file ({size} bytes)")
        metadata, header = _check_header(json.loads(read(header_len)), size)
        base, position = 8 + header_len, 0
        tensors: dict[str, np.ndarray] = {}
        for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
            start, stop = entry["data_offsets"]
            if not position <= start <= stop <= size - base:
                raise ValueError(f"tensor {name} lies outside the file or overlaps another")
            dtype = _FROM_CODE[entry["dtype"]]
            count = (stop - start) // dtype.itemsize
            if count * dtype.itemsize != stop - start or count != math.prod(entry["shape"]):
                raise ValueError(f"tensor {name} has {stop - start} bytes for shape "
                                 f"{entry['shape']}")
            if start > position:
                read(start - position)
            array = np.empty(count, dtype=dtype)
            read_into(memoryview(array.data).cast("B"))
            tensors[name] = array.reshape(entry["shape"])
            position = stop
        while base + position < size:  # bytes after the last tensor still count in the digest
            position += len(read(min(size - base - position, 1 << 20)))
    except _READ_ERRORS as exc:
        raise CheckpointError(f"not an elasticps checkpoint file: {exc!s:.200}") from exc
    _check_format(metadata)
    return metadata, tensors, digest.hexdigest()


def _check_metadata(metadata: dict[str, Any]) -> None:
    kinds: dict[str, type | tuple[type, ...]] = {
        "shard": int, "num_shards": int, "initialized": bool, "tables": list,
        "dense_steps": dict, "counters": dict}
    for name, kind in kinds.items():
        value = metadata.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CheckpointError(f"checkpoint metadata field {name!r} is {shown(value)}")
    if not all(isinstance(t, dict) for t in metadata["tables"]):
        raise CheckpointError("checkpoint metadata 'tables' is not a list of objects")
    for name in ("dense_steps", "counters"):
        if not all(type(v) is int for v in metadata[name].values()):
            raise CheckpointError(f"checkpoint metadata {name!r} holds a non-integer")


def _delta_parent(metadata: dict[str, Any]) -> str:
    """The parent checkpoint id of a delta, "" for a full checkpoint."""
    delta = metadata.get("delta")
    if delta is None:
        return ""
    parent = delta.get("parent") if isinstance(delta, dict) else None
    if not isinstance(parent, str) or not parent.isdigit() or not 0 < len(parent) <= 20:
        raise CheckpointError(f"checkpoint metadata 'delta' is {shown(delta)}")
    return parent


_BOOK: dict[str, np.dtype[Any]] = {
    ".touched_pass": np.dtype("<i4"), ".pushed_unix": np.dtype("<f8"), ".hits": np.dtype("<u4")}
_SCORES: dict[str, np.dtype[Any]] = {
    ".shows": np.dtype("<f4"), ".clicks": np.dtype("<f4"), ".score_pass": np.dtype("<i4")}


def _per_row(tensors: dict[str, np.ndarray], prefix: str, rows: int,
             layout: dict[str, np.dtype[Any]]) -> dict[str, np.ndarray | None]:
    """Optional per-row tensors, each checked to be ``[rows]`` of its dtype."""
    found = {key: tensors.get(prefix + key) for key in layout}
    for key, dtype in layout.items():
        array = found[key]
        if array is not None and (array.dtype != dtype or array.shape != (rows,)):
            raise CheckpointError(f"checkpoint tensor {prefix}{key} is not {dtype} [{rows}]")
    return found


def _scores(tensors: dict[str, np.ndarray], prefix: str, rows: int,
            own: Any) -> RowScores | None:
    scores = _per_row(tensors, prefix, rows, _SCORES)
    if any(a is None for a in scores.values()):
        return None  # not a SCORE table, or a file from before scores: rows shown once
    return RowScores(own(scores[".shows"]), own(scores[".clicks"]), own(scores[".score_pass"]))


def _bookkeeping(tensors: dict[str, np.ndarray], prefix: str,
                 rows: int, own: Any = np.array) -> RowBookkeeping | None:
    """A table's optional bookkeeping tensors, checked; None when the file has none."""
    per_row = _per_row(tensors, prefix, rows, _BOOK)
    sketch = tensors.get(prefix + ".sketch")
    aging = tensors.get(prefix + ".sketch_aging")
    scores = _scores(tensors, prefix, rows, own)
    if all(a is None for a in per_row.values()) and sketch is None and scores is None:
        return None
    if sketch is not None and (sketch.ndim != 2 or sketch.dtype != np.dtype("<u2")
                               or aging is None or aging.shape != (1,)):
        raise CheckpointError(f"checkpoint tensor {prefix}.sketch is not uint16 [depth, "
                              "width] with its sketch_aging")
    if any(a is None for a in per_row.values()):  # a table that admits but does not evict
        per_row = {key: np.zeros(0).astype(dtype) for key, dtype in _BOOK.items()}
    return RowBookkeeping(
        own(per_row[".touched_pass"]), own(per_row[".pushed_unix"]),
        own(per_row[".hits"]), None if sketch is None else own(sketch),
        0 if aging is None else int(aging[0]), scores)


def _legacy(metadata: dict[str, Any], tensors: dict[str, np.ndarray]) -> list[LegacyLayout]:
    """The earlier layouts a resharded shard remembers, checked."""
    counts = metadata.get("legacy_shards", [])
    if not isinstance(counts, list) or not all(type(n) is int and 1 <= n <= MAX_LEGACY_SHARDS
                                               for n in counts):
        raise CheckpointError(f"checkpoint metadata 'legacy_shards' is {shown(counts)}")
    layouts = []
    for k, num_shards in enumerate(counts):
        sets = []
        for i in range(num_shards):
            prefix = f"legacy.{k}.{i}."
            tasks, extra, floor = (tensors.get(prefix + part)
                                   for part in ("tasks", "extra", "floor"))
            if (tasks is None or extra is None or floor is None or floor.shape != (1,)
                    or any(a.dtype != np.int64 for a in (tasks, extra, floor))
                    or any(a.ndim != 2 or a.shape[1] != 3 for a in (tasks, extra))):
                raise CheckpointError(f"checkpoint tensors {prefix}tasks|extra|floor are "
                                      "missing or not int64 [k, 3], [m, 3], [1]")
            sets.append(AppliedSet.from_arrays(tasks, extra, None, int(floor[0])))
        layouts.append(LegacyLayout(num_shards, sets))
    return layouts


def to_snapshot(metadata: dict[str, Any], tensors: dict[str, np.ndarray],
                copy: bool = True) -> ShardSnapshot:
    """Rebuild a ShardSnapshot. Arrays are copied out of the file buffer, so they are writable;
    ``copy=False`` for arrays already owned (:func:`read_stream`'s) takes them as they are.

    The metadata's fields and the arrays' ranks are checked first; anything inconsistent is a
    CheckpointError, so a bad checkpoint is skipped rather than crashing the pserver.
    """
    _check_metadata(metadata)
    own = np.array if copy else np.asarray
    for name, want in (("applied.tasks", 2), ("applied.extra", 2), ("applied.counts", 2)):
        array = tensors.get(name)
        if array is None and name == "applied.counts":
            continue
        if array is None or array.ndim != want or array.shape[1] != 3 or array.dtype != np.int64:
            raise CheckpointError(f"checkpoint tensor {name} is not int64 [k, 3]")
    for name, array in tensors.items():
        if name.startswith("sparse.") and name.endswith((".ids", ".tombstones")) and (
                array.ndim != 1 or array.dtype != np.int64):
            raise CheckpointError(f"checkpoint tensor {name} is not int64 [n]")
    parent = _delta_parent(metadata)
    try:
        specs = [json_format.ParseDict(t, pserver_pb2.TableSpec()) for t in metadata["tables"]]
        dense: dict[str, DenseState] = {}
        sparse: dict[str, SparseState] = {}
        for spec in specs:
            is_dense = spec.kind == pserver_pb2.TableSpec.DENSE
            prefix = ("dense." if is_dense else "sparse.") + spec.name
            slots = {key.rsplit(".slot.", 1)[1]: own(arr) for key, arr in tensors.items()
                     if key.startswith(prefix + ".slot.")}
            if spec.kind == pserver_pb2.TableSpec.DENSE:
                dense[spec.name] = DenseState(own(tensors[prefix + ".value"]), slots,
                                              int(metadata["dense_steps"][spec.name]))
            else:
                ids = own(tensors[prefix + ".ids"])
                sparse[spec.name] = SparseState(
                    ids, own(tensors[prefix + ".value"]),
                    slots, own(tensors[prefix + ".steps"]),
                    _bookkeeping(tensors, prefix, ids.shape[0], own))
        floor = tensors.get("applied.floor")
        applied = AppliedSet.from_arrays(
            tensors["applied.tasks"], tensors["applied.extra"], tensors.get("applied.counts"),
            int(floor[0]) if floor is not None and floor.size else 0)
        return ShardSnapshot(
            legacy=_legacy(metadata, tensors),
            shard=int(metadata["shard"]), num_shards=int(metadata["num_shards"]), specs=specs,
            initialized=bool(metadata["initialized"]), dense=dense, sparse=sparse,
            applied=applied, counters={k: int(v) for k, v in metadata["counters"].items()},
            delta=bool(parent), parent=parent,
            tombstones={spec.name: own(tensors.get(f"sparse.{spec.name}.tombstones",
                                                        np.zeros(0, np.int64)))
                        for spec in specs if parent and spec.kind == pserver_pb2.TableSpec.SPARSE},
        )
    except (KeyError, ValueError, TypeError, AttributeError, IndexError, OverflowError,
            json_format.ParseError) as exc:
        raise CheckpointError(f"checkpoint content is inconsistent: {shown(exc)}") from exc
