"""Fuzz: checkpoint manifests and checkpoint files (header and content) from anyone; only
CheckpointError comes out, and a manifest that parses names only its own files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticps.errors import CheckpointError
from elasticps.proto import pserver_pb2
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.manifest import Manifest, data_name
from elasticps.pserver.shard import DenseState, ShardSnapshot, SparseState
from tests.security.fuzz.common import FUZZ, json_values, with_fields

VALID_MANIFEST: dict[str, Any] = {
    "id": "000000000007", "shard": 0, "num_shards": 2, "data": "ckpt-000000000007.safetensors",
    "size": 1234, "sha256": "ab" * 32, "created_unix": 1.7e9, "format": fmt.FORMAT,
    "version": fmt.VERSION, "tables": [], "applied_batches": 3, "directory": "file:///x"}
MANIFEST_FIELDS = sorted(VALID_MANIFEST)


def _valid_file() -> bytes:
    spec = pserver_pb2.TableSpec(name="w", kind=pserver_pb2.TableSpec.DENSE, shape=[4])
    emb = pserver_pb2.TableSpec(name="e", kind=pserver_pb2.TableSpec.SPARSE, dim=2)
    snap = ShardSnapshot(
        shard=0, num_shards=1, specs=[spec, emb], initialized=True,
        dense={"w": DenseState(np.arange(4, dtype=np.float32), {}, 3)},
        sparse={"e": SparseState(np.array([5, 9], dtype=np.int64),
                                 np.ones((2, 2), dtype=np.float32), {},
                                 np.zeros(2, dtype=np.int32))},
        applied=AppliedSet(), counters={"pushes": 3})
    tensors = fmt.snapshot_tensors(snap)
    out = _Sink()
    fmt.write_stream(out, tensors, fmt.snapshot_metadata(snap, "000000000001"))
    return bytes(out.buf)


class _Sink:
    def __init__(self) -> None:
        self.buf = bytearray()

    def write(self, chunk: bytes | memoryview) -> None:
        self.buf += chunk


VALID_FILE = _valid_file()
VALID_HEADER_LEN = struct.unpack_from("<Q", VALID_FILE)[0]
VALID_HEADER = json.loads(VALID_FILE[8:8 + VALID_HEADER_LEN])


@pytest.mark.timeout(60)
@FUZZ
@given(doc=with_fields(VALID_MANIFEST, MANIFEST_FIELDS) | json_values)
def test_manifest_parser_raises_only_checkpoint_error(doc: Any) -> None:
    try:
        manifest = Manifest.from_json(json.dumps(doc))
    except CheckpointError:
        return
    # what parses names its own data file, whatever the manifest's "data" said
    assert manifest.data == data_name(manifest.id)
    assert "/" not in manifest.data
    assert manifest.id.isdigit()


@pytest.mark.timeout(60)
@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_manifest_parser_takes_any_bytes(raw: bytes) -> None:
    with contextlib.suppress(CheckpointError):
        Manifest.from_json(raw)


def _file_with_header(header: Any, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


@st.composite
def mutated_headers(draw: st.DrawFn) -> bytes:
    """The valid file's header with entries or metadata replaced, dropped or added."""
    header = json.loads(json.dumps(VALID_HEADER))
    names = sorted(header)
    for name in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        choice = draw(st.integers(0, 2))
        if choice == 0:
            header[name] = draw(json_values)
        elif choice == 1:
            header.pop(name)
        elif isinstance(header[name], dict) and name != "__metadata__":
            key = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
            header[name][key] = draw(json_values)
    if draw(st.booleans()):
        meta = json.loads(VALID_HEADER["__metadata__"]["elasticps"])
        meta[draw(st.sampled_from(sorted(meta)))] = draw(json_values)
        header["__metadata__"] = {"elasticps": json.dumps(meta)}
    if draw(st.integers(0, 9)) == 0:
        header = draw(json_values)
    return _file_with_header(header, VALID_FILE[8 + VALID_HEADER_LEN:])


@pytest.mark.timeout(60)
@FUZZ
@given(data=mutated_headers() | st.binary(max_size=300)
       | st.builds(lambda cut: VALID_FILE[:cut], st.integers(0, len(VALID_FILE))))
def test_checkpoint_file_parser_raises_only_checkpoint_error(data: bytes) -> None:
    """A file whose checksum holds (its manifest was forged to match) is still checked."""
    assert hashlib.sha256(data).hexdigest()  # what a forged manifest would carry
    try:
        metadata, tensors = fmt.parse(data)
        snap = fmt.to_snapshot(metadata, tensors)
    except CheckpointError:
        return
    assert isinstance(snap, ShardSnapshot)


def test_the_valid_file_parses() -> None:
    snap = fmt.to_snapshot(*fmt.parse(VALID_FILE))
    assert snap.dense["w"].step == 3
