"""The dense replica's checkpoints: written by a generation's rank 0, so a job whose every
trainer died resumes its dense state.

The files are the pservers' (``pserver/checkpoint/``: safetensors data, fsynced, checksummed,
renamed, then published), in ``<PADDLE_CHECKPOINT_URL>/hybrid-dense/shard-0-of-1``; the
manifests are published at ``hybrid/checkpoint/<id>`` only while the writer's generation is
the current one (a compare on the record's mod_revision), so a member of an ended generation
publishes nothing. ``<id>`` is the state's key, generation then step (8 + 12 digits), so the
newest checkpoint is also the most advanced state.
"""

from __future__ import annotations

import logging
import secrets

from elasticps.errors import CheckpointError, StoreError
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.store.api import Compare, Store
from elasticps.store.keys import HYBRID_CHECKPOINT_PREFIX, HYBRID_GROUP
from elasticps.trainer.hybrid.replica import DenseReplica

log = logging.getLogger(__name__)

SUBDIR = "hybrid-dense"
Key = tuple[int, int]  # (generation, step)


def checkpoint_id(key: Key) -> str:
    generation, step = key
    return f"{generation:08d}{step:012d}"


def key_of(checkpoint: str) -> Key:
    return int(checkpoint[:8]), int(checkpoint[8:])


class DenseCheckpoints:
    """Save and find the replica's checkpoints under ``url`` (see the module docstring)."""

    def __init__(self, url: str, store: Store, node: str, keep: int = 3) -> None:
        self.node = node
        self._revision = 0  # the generation's record revision that fences a publication
        self.files = ShardCheckpoints(
            f"{url.rstrip('/')}/{SUBDIR}", 0, 1, keep=keep, store=store, node=node,
            owner=self._owner, writer=secrets.token_hex(8),  # one per process
            key_prefix=HYBRID_CHECKPOINT_PREFIX, owned="the dense group's current generation")

    def _owner(self) -> Compare | None:
        return Compare.mod_revision(HYBRID_GROUP, self._revision) if self._revision else None

    def newest_key(self) -> Key | None:
        """The key of the newest published checkpoint, or None."""
        ids = [m.id for m in self.files.manifests() if len(m.id) == 20 and m.id.isdigit()]
        return key_of(max(ids)) if ids else None

    def save(self, replica: DenseReplica, revision: int) -> bool:
        """Write the replica's state as a checkpoint of generation ``revision``; False (logged)
        if it was not published: the generation ended, the write failed or the store was
        unreachable. Training goes on
        either way: the state lives on in the replicas."""
        key = replica.key
        if key is None:
            return False
        self._revision = revision
        try:
            self.files.save(replica.snapshot(), checkpoint_id(key))
        except (CheckpointError, StoreError, OSError) as exc:
            log.warning("%s did not publish the dense checkpoint of step %d: %s", self.node,
                        key[1], exc)
            return False
        return True

    def restore_newest(self, replica: DenseReplica) -> Key | None:
        """Load the newest checkpoint whose checksum holds into ``replica``; its key, or None."""
        loaded = self.files.load_newest()
        if loaded is None:
            return None
        snap, manifest = loaded
        replica.restore(snap)
        log.info("%s restored the dense state from checkpoint %s (generation %d, step %d).",
                 self.node, manifest.id, *key_of(manifest.id))
        return replica.key
