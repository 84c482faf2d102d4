"""A checkpoint's manifest (``ckpt-<id>-<writer>.json``, also published in the store), read
strictly.

A manifest comes from a file system or a store that others may write, so reading one trusts
nothing: every field is type-checked, the id must be a checkpoint id (decimal digits), the writer
a short alphanumeric tag (empty in checkpoints written before writers were named), and the file
names a checkpoint touches are derived from those two (:func:`data_name`,
:func:`manifest_name`), never taken from the manifest as given, so no manifest can make a pserver
(or ``checkpoint inspect``) read or delete a file outside its shard directory. Any failure is a
:class:`~elasticps.errors.CheckpointError`; callers skip such a manifest and fall back to the
previous checkpoint.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from elasticps.errors import CheckpointError
from elasticps.pserver.checkpoint import format as fmt

MAX_MANIFEST_BYTES = 1 << 20
MAX_TABLES = 10_000
_ID = re.compile(r"^[0-9]{1,20}\Z")
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
_WRITER = re.compile(r"^[0-9A-Za-z]{0,32}\Z")
_DATA = re.compile(r"^ckpt-([0-9]{1,20})(?:-([0-9A-Za-z]{1,32}))?\.safetensors\Z")


def check_id(checkpoint_id: object) -> str:
    """A checkpoint id: 1-20 decimal digits (ids are zero-padded sequence numbers)."""
    if not isinstance(checkpoint_id, str) or not _ID.match(checkpoint_id):
        raise CheckpointError(f"checkpoint id {checkpoint_id!r:.40} is not 1-20 decimal digits")
    return checkpoint_id


def check_writer(writer: object) -> str:
    """A writer tag: at most 32 ASCII letters and digits (empty: an unnamed, older writer)."""
    if not isinstance(writer, str) or not _WRITER.match(writer):
        raise CheckpointError(f"checkpoint writer {writer!r:.40} is not at most 32 letters and "
                              "digits")
    return writer


def _stem(checkpoint_id: str, writer: str) -> str:
    tag = check_writer(writer)
    return f"ckpt-{check_id(checkpoint_id)}" + (f"-{tag}" if tag else "")


def data_name(checkpoint_id: str, writer: str = "") -> str:
    """The data file of checkpoint ``checkpoint_id`` written by ``writer``, relative to its
    shard directory."""
    return _stem(checkpoint_id, writer) + ".safetensors"


def manifest_name(checkpoint_id: str, writer: str = "") -> str:
    return _stem(checkpoint_id, writer) + ".json"


@dataclass(frozen=True)
class Manifest:
    """What a checkpoint holds and how to check it; published in the store as JSON."""

    id: str
    shard: int
    num_shards: int
    data: str  # always data_name(id, writer): checked on reading
    size: int
    sha256: str
    created_unix: float
    format: str = fmt.FORMAT
    version: int = fmt.VERSION
    tables: list[dict[str, Any]] = field(default_factory=list)  # name, kind, rows, slots
    applied_batches: int = 0
    directory: str = ""  # the shard directory's URL (informational)
    parent: str = ""  # a delta's parent checkpoint id; "" for a full checkpoint

    @property
    def writer(self) -> str:
        """The tag of the process that wrote it (a fenced writer's incarnation), or ""."""
        found = _DATA.match(self.data)
        return (found.group(2) or "") if found else ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Manifest:
        """Parse and check a manifest; CheckpointError on anything malformed. Fields this
        version does not know are ignored (a newer writer may add some)."""
        if len(raw) > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"checkpoint manifest of {len(raw)} bytes is too large")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CheckpointError(f"malformed checkpoint manifest: {exc!s:.120}") from exc
        if not isinstance(doc, dict):
            raise CheckpointError(f"checkpoint manifest is a {type(doc).__name__}, not an object")
        checkpoint_id = check_id(doc.get("id"))
        shard, num_shards = _int(doc, "shard"), _int(doc, "num_shards", minimum=1)
        if shard >= num_shards:
            raise CheckpointError(f"checkpoint {checkpoint_id}: shard {shard} of {num_shards}")
        data = doc.get("data")
        named = _DATA.match(data) if isinstance(data, str) else None
        if named is None or named.group(1) != checkpoint_id:
            raise CheckpointError(f"checkpoint {checkpoint_id}: its data file must be "
                                  f"ckpt-{checkpoint_id}[-WRITER].safetensors, the manifest "
                                  f"names {data!r:.80}")
        sha256 = doc.get("sha256")
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise CheckpointError(f"checkpoint {checkpoint_id}: sha256 is not 64 hex digits")
        created = doc.get("created_unix")
        if not isinstance(created, int | float) or isinstance(created, bool) or not (
                math.isfinite(created) and 0 <= created < 1e11):
            raise CheckpointError(f"checkpoint {checkpoint_id}: created_unix is not a time")
        tables = doc.get("tables", [])
        if not isinstance(tables, list) or len(tables) > MAX_TABLES or not all(
                isinstance(t, dict) for t in tables):
            raise CheckpointError(f"checkpoint {checkpoint_id}: tables is not a list of objects")
        return cls(
            id=checkpoint_id, shard=shard, num_shards=num_shards, data=named.group(0),
            size=_int(doc, "size"), sha256=sha256, created_unix=float(created),
            format=_str(doc, "format", fmt.FORMAT), version=_int(doc, "version", fmt.VERSION),
            tables=tables, applied_batches=_int(doc, "applied_batches", 0),
            directory=_str(doc, "directory", ""),
            parent=_parent(doc, checkpoint_id),
        )


def _parent(doc: dict[str, Any], checkpoint_id: str) -> str:
    parent = doc.get("parent", "")
    if parent == "":
        return ""
    check_id(parent)
    if int(parent) >= int(checkpoint_id):
        raise CheckpointError(f"checkpoint {checkpoint_id}: its parent {parent} is not older")
    return str(parent)


def _int(doc: dict[str, Any], name: str, default: int | None = None, minimum: int = 0) -> int:
    value = doc.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value < 2**63:
        raise CheckpointError(f"checkpoint manifest field {name!r} must be an integer >= "
                              f"{minimum}, got {value!r:.40}")
    return value


def _str(doc: dict[str, Any], name: str, default: str) -> str:
    value = doc.get(name, default)
    if not isinstance(value, str) or len(value) > 4096:
        raise CheckpointError(f"checkpoint manifest field {name!r} must be a short string")
    return value
