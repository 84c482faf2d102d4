"""Atomic, checksummed, versioned checkpoints of one pserver shard on any fsspec URL.

Layout under the checkpoint URL::

    <url>/shard-<i>-of-<N>/ckpt-<id>-<writer>.safetensors   the data (see format.py)
    <url>/shard-<i>-of-<N>/ckpt-<id>-<writer>.json          the manifest: size, sha256, summary

On a local disk the shard directory is 0700 and every file 0600, whatever the umask (a new
checkpoint root is made 0700 too): no other user of the machine reads a tensor.

``<id>`` is a zero-padded sequence number, so names sort by age; ``<writer>`` names the process
that wrote it (older checkpoints have none), so two processes that believe they own the slot
never write the same file. A save:

1. streams the data to a temp file (``.tmp-<name>.<random>``, created exclusively: see
   :mod:`elasticps.safe_files`), hashing as it goes, then flushes and fsyncs it, and renames
   it into place (atomic on a local or POSIX file system);
2. writes the manifest the same way (temp, fsync, rename);
3. publishes the manifest in the store under ``pserver/checkpoint/<i>/<id>`` in a transaction
   that checks the writer still owns its slot (``owner``: a compare on the slot key's
   ``create_revision`` from the writer's claim). This is the commit point: a writer that lost
   its slot (a zombie whose lease expired while another process took the slot over) publishes
   nothing, deletes the files it wrote, and raises :class:`CheckpointError`;
4. only then deletes checkpoints beyond the newest ``keep`` (store key first, then files).

With ``deltas = K > 0`` (``PADDLE_CHECKPOINT_DELTAS``) a save after a full checkpoint writes a
delta (:mod:`.delta`: only the rows pushed since, and tombstones) whose manifest names
its parent, up to K deltas, then a full one again; ``keep`` then counts full checkpoints, and
every delta on a kept one is kept too. A save that fails makes the next one full (the shard's
change marks were spent on the snapshot that was not published), as does a restart.

A load takes the manifests published in the store (without a store: those in the directory),
newest first, and returns the first whose data file (and, for a delta, every link of its chain)
has the manifest's size and sha256, logging each one it skips — so a truncated or bit-flipped
newest checkpoint falls back to the previous one, and a file nobody published (a zombie's, or
a write cut before step 3) is never restored.
Manifests are read strictly (:mod:`.manifest`): file names come from the checkpoint
id and writer tag, never from the manifest as given, and every path is checked to lie in the
shard directory before it is read or deleted. Others may write the directory too: only regular
files are read (a FIFO or a link in a file's place is an unreadable checkpoint), and a
directory or FIFO where a file or a crashed write's leftover was expected is skipped with a
warning, never a reason not to start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np

from elasticps.errors import CheckpointError, shown
from elasticps.private_files import FILE_MODE, make_private_dir
from elasticps.pserver.checkpoint import format as fmt
from elasticps.pserver.checkpoint.delta import apply_delta, chain, to_keep
from elasticps.pserver.checkpoint.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    check_writer,
    data_name,
    manifest_name,
)
from elasticps.pserver.checkpoint.snapshot import ShardSnapshot
from elasticps.safe_files import (
    create_temp,
    is_local,
    open_regular,
    read_regular,
    remove_file,
)
from elasticps.store.api import Compare, Put, Store
from elasticps.store.keys import checkpoint_key, checkpoint_prefix

__all__ = ["BeforePublish", "Manifest", "ShardCheckpoints", "shard_dir_name"]

log = logging.getLogger(__name__)

# Called with the temp path of a checkpoint's data file once it is written and fsynced, just
# before its rename: the point where a crash leaves a torn write. Tests inject faults here.
BeforePublish = Callable[[str], None]
# The compare that holds while the writer owns its slot (None: it does not know it owns it).
Owner = Callable[[], Compare | None]


def shard_dir_name(shard: int, num_shards: int) -> str:
    return f"shard-{shard}-of-{num_shards}"


class ShardCheckpoints:
    """The checkpoints of one shard slot under one URL. ``before_publish(temp_path)``, if given,
    runs between the data file's fsync and its rename (tests pause or kill the writer there).
    ``owner`` fences the publication (module docstring); ``writer`` goes into file names."""

    def __init__(
        self,
        url: str,
        shard: int,
        num_shards: int,
        *,
        keep: int = 3,
        store: Store | None = None,
        before_publish: BeforePublish | None = None,
        node: str = "pserver",
        owner: Owner | None = None,
        writer: str = "",
        deltas: int = 0,
    ) -> None:
        if keep < 1:
            raise CheckpointError(f"keep={keep}: at least one checkpoint must be kept")
        self.fs, root = fsspec.core.url_to_fs(url)
        self.url = url.rstrip("/")
        self.dir = f"{root.rstrip('/')}/{shard_dir_name(shard, num_shards)}"
        self.shard, self.num_shards, self.keep = shard, num_shards, keep
        self.store = store
        self.node = node
        self.before_publish = before_publish
        self.owner = owner
        self.writer = check_writer(writer)
        self.deltas = deltas
        self._chain: list[str] = []  # this writer's published chain since its last full save
        self._lock = threading.Lock()
        self._local = is_local(self.fs)
        if self._local:  # the owner's alone: other users of the machine read no tensor
            make_private_dir(Path(root), narrow=False)
            make_private_dir(Path(self.dir), what="the checkpoint directory")
        else:
            self.fs.makedirs(self.dir, exist_ok=True)

    # -- listing ----------------------------------------------------------------------------

    def manifests(self) -> list[Manifest]:
        """Every manifest of this slot, newest first: those published in the store (the commit
        point), or without a store those in the directory."""
        found: dict[str, Manifest] = {}
        if self.store is not None:
            for kv in self.store.get_prefix(checkpoint_prefix(self.shard)):
                try:
                    manifest = Manifest.from_json(kv.value)
                except CheckpointError as exc:
                    log.warning("%s skips store key %s: %s", self.node, kv.key, exc)
                    continue
                found[manifest.id] = manifest
            return self._of_this_slot(found)
        for name in self.fs.ls(self.dir, detail=False):
            base = name.rsplit("/", 1)[-1]
            if base.startswith("ckpt-") and base.endswith(".json"):
                try:
                    manifest = Manifest.from_json(read_regular(self.fs, name,
                                                               MAX_MANIFEST_BYTES))
                except (CheckpointError, OSError) as exc:
                    log.warning("%s skips the unreadable manifest %s: %s", self.node, name, exc)
                    continue
                found[manifest.id] = manifest
        return self._of_this_slot(found)

    def _of_this_slot(self, found: dict[str, Manifest]) -> list[Manifest]:
        slot = (self.shard, self.num_shards)
        mine = [m for m in found.values() if (m.shard, m.num_shards) == slot]
        return sorted(mine, key=lambda m: m.id, reverse=True)

    def _next_id(self) -> str:
        existing = [int(m.id) for m in self.manifests() if m.id.isdigit()]
        return f"{max(existing, default=0) + 1:012d}"

    # -- save -------------------------------------------------------------------------------

    def wants_delta(self) -> bool:
        """Whether the next save may be a delta (the caller snapshots accordingly)."""
        return 0 < len(self._chain) <= self.deltas

    def save(self, snap: ShardSnapshot) -> Manifest:
        """Write, fsync, checksum, rename, publish, then prune. Returns the new manifest."""
        with self._lock:
            parent = self._chain[-1] if snap.delta and self._chain else ""
            if snap.delta and not parent:
                raise CheckpointError(f"{self.node}: a delta snapshot needs a parent, and this "
                                      "writer has published no checkpoint yet")
            try:
                manifest = self._save(snap, parent)
            except BaseException:
                self._chain = []  # the snapshot's changes are in no published checkpoint
                raise
            self._chain = [*self._chain, manifest.id] if parent else [manifest.id]
            self._prune()
            return manifest

    def _save(self, snap: ShardSnapshot, parent: str) -> Manifest:
        checkpoint_id = self._next_id()
        manifest, body = self.write_unpublished(snap, checkpoint_id, parent)
        if self.store is not None and not self._publish(checkpoint_id, body):
            self._remove_files(checkpoint_id, self.writer)
            raise CheckpointError(
                f"{self.node} no longer owns slot {self.shard}: checkpoint {checkpoint_id} "
                "was not published (another pserver serves the slot, or this one's lease "
                "expired), and its files were deleted")
        log.info("%s wrote checkpoint %s (%d bytes, sha256 %s%s).", self.node,
                 checkpoint_id, manifest.size, manifest.sha256[:12],
                 f", a delta of {parent}" if parent else "")
        return manifest

    def write_unpublished(self, snap: ShardSnapshot, checkpoint_id: str,
                          parent: str = "") -> tuple[Manifest, bytes]:
        """Write the data file and the manifest file of checkpoint ``checkpoint_id`` (steps 1
        and 2 of a save); the caller publishes the manifest (step 3). Returns the manifest and
        its bytes."""
        data_file = data_name(checkpoint_id, self.writer)
        tensors = fmt.snapshot_tensors(snap)
        metadata = fmt.snapshot_metadata(snap, checkpoint_id, parent)
        size, digest = self._write_atomically(
            data_file, lambda out: fmt.write_stream(out, tensors, metadata),
            before_rename=self.before_publish,
        )
        manifest = Manifest(
            id=checkpoint_id, shard=self.shard, num_shards=self.num_shards, data=data_file,
            size=size, sha256=digest, created_unix=metadata["created_unix"],
            tables=_table_summary(snap), applied_batches=len(snap.applied),
            directory=f"{self.url}/{shard_dir_name(self.shard, self.num_shards)}",
            parent=parent,
        )
        body = manifest.to_json()
        self._write_atomically(
            manifest_name(checkpoint_id, self.writer), lambda out: _write_bytes(out, body)
        )
        return manifest, body

    def _publish(self, checkpoint_id: str, body: bytes) -> bool:
        """Publish the manifest if the writer still owns its slot; False if it does not."""
        assert self.store is not None
        put = Put(checkpoint_key(self.shard, checkpoint_id), body)
        if self.owner is None:
            self.store.put(put.key, put.value)
            return True
        fence = self.owner()
        return fence is not None and self.store.txn([fence], [put]).succeeded

    def remove_files(self, checkpoint_id: str, writer: str) -> None:
        """Delete a checkpoint's files (a resharding's old layout, once it is committed)."""
        self._remove_files(checkpoint_id, writer)

    def _remove_files(self, checkpoint_id: str, writer: str) -> None:
        for name in (manifest_name(checkpoint_id, writer), data_name(checkpoint_id, writer)):
            path = self._path(name)
            planted = remove_file(self.fs, path)
            if planted is not None:
                log.warning("%s leaves %s in place: it is %s, not a checkpoint file.",
                            self.node, path, planted)

    def _write_atomically(
        self, name: str, write: Callable[[Any], tuple[int, str]],
        before_rename: BeforePublish | None = None,
    ) -> tuple[int, str]:
        final = self._path(name)
        # An unpredictable name, created exclusively (a link planted at a temp name is never
        # written through) and 0600 on a local disk.
        out, temp = create_temp(self.fs, self.dir, f".tmp-{name}.", mode=FILE_MODE)
        with out:
            result = write(out)
            out.flush()
            if hasattr(out, "fileno"):
                os.fsync(out.fileno())
        if before_rename is not None:
            before_rename(temp)
        self.fs.mv(temp, final)
        self._fsync_dir()
        return result

    def _fsync_dir(self) -> None:
        if self._local:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _prune(self) -> None:
        published = self.manifests()
        kept = to_keep(published, self.keep)
        for old in published:
            if old.id in kept:
                continue
            if self.store is not None:
                self.store.delete(checkpoint_key(self.shard, old.id))
            self._remove_files(old.id, old.writer)
            log.info("%s deleted old checkpoint %s (keeping %d).", self.node, old.id, self.keep)

    def _path(self, name: str) -> str:
        """``name`` in the shard directory; a name that could lead anywhere else is refused."""
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise CheckpointError(f"{self.node}: {shown(name)} is not a file name in {self.dir}")
        return f"{self.dir}/{name}"

    def remove_temp_files(self) -> int:
        """Delete leftovers of writes that crashed before their rename. An entry named like one
        that is not a file (a directory, a FIFO) was not left by a write: it stays, with a
        warning, and the pserver starts all the same."""
        removed = 0
        for name in self.fs.ls(self.dir, detail=False):
            if not name.rsplit("/", 1)[-1].startswith(".tmp-"):
                continue
            try:
                planted = remove_file(self.fs, name)
            except OSError as exc:
                log.warning("%s cannot remove the unfinished checkpoint file %s: %s",
                            self.node, name, exc)
                continue
            if planted is None:
                removed += 1
            else:
                log.warning("%s skips %s in its checkpoint directory: it is %s, not the "
                            "leftover of a write.", self.node, name, planted)
        return removed

    # -- load -------------------------------------------------------------------------------

    def read_verified(self, manifest: Manifest
                      ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The data file's (metadata, tensors) if its size and sha256 match the manifest. The
        file is streamed into the tensors' own arrays (one pass, hashed on the way), never held
        whole; nothing is returned before the digest is checked."""
        path = self._path(data_name(manifest.id, manifest.writer))
        try:
            on_disk = self.fs.size(path)
            if on_disk != manifest.size:  # checked before reading: never read a huge file
                raise CheckpointError(f"checkpoint {manifest.id}: {path} has {on_disk} bytes, "
                                      f"the manifest says {manifest.size} (truncated?)")
            with open_regular(self.fs, path) as handle:
                metadata, tensors, digest = fmt.read_stream(handle, manifest.size)
        except (OSError, FileNotFoundError) as exc:
            raise CheckpointError(f"checkpoint {manifest.id}: cannot read {path}: {exc}") from exc
        except CheckpointError as exc:
            raise CheckpointError(f"checkpoint {manifest.id}: {path}: {exc} (truncated or "
                                  "corrupt)") from exc
        if digest != manifest.sha256:
            raise CheckpointError(
                f"checkpoint {manifest.id}: sha256 of {path} is {digest}, the manifest says "
                f"{manifest.sha256} (corrupt)"
            )
        return metadata, tensors

    def load_newest(self) -> tuple[ShardSnapshot, Manifest] | None:
        """The newest checkpoint whose checksum holds, or None if there is none."""
        published = self.manifests()
        for manifest in published:
            try:
                snap = self._load_chain(manifest, published)
            except CheckpointError as exc:
                log.error("%s skips checkpoint %s: %s; trying the previous one.",
                          self.node, manifest.id, exc)
                continue
            if (snap.shard, snap.num_shards) != (self.shard, self.num_shards):
                log.error("%s skips checkpoint %s: it holds shard %d of %d.",
                          self.node, manifest.id, snap.shard, snap.num_shards)
                continue
            return snap, manifest
        return None


    def _load_chain(self, manifest: Manifest, published: list[Manifest]) -> ShardSnapshot:
        """The state ``manifest`` restores: its base with every delta of its chain applied."""
        state: ShardSnapshot | None = None
        for link in chain(manifest, published):
            part = fmt.to_snapshot(*self.read_verified(link), copy=False)
            if part.parent != link.parent:
                raise CheckpointError(f"checkpoint {link.id}: its file names parent "
                                      f"{part.parent or 'none'}, its manifest "
                                      f"{link.parent or 'none'}")
            state = part if state is None else apply_delta(state, part)
        assert state is not None
        return state


def _write_bytes(out: Any, body: bytes) -> tuple[int, str]:
    out.write(body)
    return len(body), hashlib.sha256(body).hexdigest()


def _table_summary(snap: ShardSnapshot) -> list[dict[str, Any]]:
    summary: list[dict[str, Any]] = []
    for name, dense in snap.dense.items():
        summary.append({"name": name, "kind": "dense", "rows": int(dense.values.shape[0]),
                        "slots": sorted(dense.slots)})
    for name, sparse in snap.sparse.items():
        summary.append({"name": name, "kind": "sparse", "rows": int(sparse.ids.shape[0]),
                        "slots": sorted(sparse.slots)})
    return summary
