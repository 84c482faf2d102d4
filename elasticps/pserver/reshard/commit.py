"""Carry out a resharding on checkpoints: read the old layout, write the new, commit in the store.

:func:`commit_reshard` runs while no pserver serves the job (the caller stopped them; their
final checkpoints are their newest): it

1. reads the newest good checkpoint of every old shard (base + deltas, checksums verified);
2. builds the new shards' states (:func:`elasticps.pserver.reshard.split.reshard_snapshots`) and
   writes each as a full checkpoint of the new layout (``shard-<j>-of-<M>``), not yet published;
3. commits in ONE store transaction: every new manifest and the new ``pserver/layout``
   (generation + 1), only if the layout is still the one it read and no pserver holds an old
   slot. Before this point nothing the job reads has changed (a failure leaves unpublished files
   that nobody restores); after it, pservers started for the job serve the new layout and
   restore the new checkpoints, and clients route by it;
4. then deletes the manifests (and files) of every other layout, newest ids last.

New checkpoint ids are above every id published for the job, so the new checkpoints are the
newest of their slots however many layouts came before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from elasticps.errors import (
    CheckpointError,
    FailedPreconditionError,
    InvalidArgumentError,
    StoreError,
)
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.checkpoint.manifest import Manifest
from elasticps.pserver.reshard.split import reshard_snapshots
from elasticps.store.api import Compare, Put, Store
from elasticps.store.keys import (
    MAX_PSERVERS_IN_LAYOUT,
    PSERVER_CHECKPOINT_PREFIX,
    PSERVER_LAYOUT,
    PServerLayout,
    checkpoint_key,
    pserver_slot,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReshardResult:
    old_shards: int
    new_shards: int
    generation: int
    checkpoints: list[str]  # the new layout's checkpoint ids, by shard
    rows: int  # sparse rows moved
    read_s: float
    write_s: float


def commit_reshard(store: Store, checkpoint_url: str, started_with: int, new_shards: int,
                   *, keep: int = 3) -> ReshardResult:
    """Move the job's tables from its current layout to ``new_shards`` shards (see the module
    docstring). ``started_with``: the job's pserver count before any resharding."""
    if not 1 <= new_shards <= MAX_PSERVERS_IN_LAYOUT:
        raise InvalidArgumentError(f"--pservers={new_shards} must be in [1, "
                                   f"{MAX_PSERVERS_IN_LAYOUT}]")
    # One read: the count it gives and the revision the commit compares must be the same.
    layout_kv = store.get(PSERVER_LAYOUT)
    layout = None if layout_kv is None else PServerLayout.decode(layout_kv.value, PSERVER_LAYOUT)
    old_shards = layout.shards if layout is not None else started_with
    generation = (layout.generation if layout is not None else 0) + 1
    if old_shards == new_shards:
        raise InvalidArgumentError(f"the job already has {new_shards} pserver shards")
    busy = [i for i in range(old_shards) if store.get(pserver_slot(i)) is not None]
    if busy:
        raise FailedPreconditionError(f"pserver slot(s) {busy} are still held: a resharding "
                                      "needs every pserver of the job stopped")

    started = time.perf_counter()
    old = []
    for i in range(old_shards):
        loaded = ShardCheckpoints(checkpoint_url, i, old_shards, store=store,
                                  node=f"resharding {old_shards}->{new_shards}").load_newest()
        if loaded is None:
            raise CheckpointError(f"pserver shard {i} of {old_shards} has no readable "
                                  "checkpoint: resharding starts from every shard's newest "
                                  "(is PADDLE_CHECKPOINT_URL set, and did the pserver stop "
                                  "cleanly or checkpoint before it died?)")
        old.append(loaded[0])
    read_s = time.perf_counter() - started

    started = time.perf_counter()
    states = reshard_snapshots(old, new_shards)
    published = _published(store)
    first_id = max((int(m.id) for m in published if m.id.isdigit()), default=0) + 1
    writer = f"reshard{generation}"
    puts: list[Put] = []
    ids: list[str] = []
    for j, state in enumerate(states):
        checkpoint_id = f"{first_id:012d}"
        manifest, body = ShardCheckpoints(checkpoint_url, j, new_shards, keep=keep,
                                          writer=writer).write_unpublished(state, checkpoint_id)
        puts.append(Put(checkpoint_key(j, manifest.id), body))
        ids.append(manifest.id)
    write_s = time.perf_counter() - started

    unchanged = (Compare.missing(PSERVER_LAYOUT) if layout_kv is None
                 else Compare.mod_revision(PSERVER_LAYOUT, layout_kv.mod_revision))
    slots_free = [Compare.missing(pserver_slot(i)) for i in range(old_shards)]
    committed = store.txn([unchanged, *slots_free],
                          [*puts, Put(PSERVER_LAYOUT,
                                      PServerLayout(new_shards, generation).encode())])
    if not committed.succeeded:
        raise FailedPreconditionError(
            "the resharding was not committed: the layout changed meanwhile, or a pserver "
            "claimed a slot of the old layout; nothing changed")
    _forget_other_layouts(store, checkpoint_url, published)
    log.info("Resharded %d -> %d pserver shards (generation %d): read %.2fs, wrote %.2fs.",
             old_shards, new_shards, generation, read_s, write_s)
    rows = sum(s.ids.shape[0] for state in states for s in state.sparse.values())
    return ReshardResult(old_shards, new_shards, generation, ids, rows, read_s, write_s)


def _published(store: Store) -> list[Manifest]:
    found = []
    for kv in store.get_prefix(PSERVER_CHECKPOINT_PREFIX):
        try:
            found.append(Manifest.from_json(kv.value))
        except CheckpointError as exc:
            log.warning("Resharding skips store key %s: %s", kv.key, exc)
    return found


def _forget_other_layouts(store: Store, checkpoint_url: str, old: list[Manifest]) -> None:
    """The old layouts' manifests, then their files: nothing restores them any more (they are
    of another shard count, and older). Best effort: the commit has happened, so a failure here
    leaves garbage, never an error."""
    for manifest in sorted(old, key=lambda m: m.id):
        try:
            store.delete(checkpoint_key(manifest.shard, manifest.id))
            ShardCheckpoints(checkpoint_url, manifest.shard, manifest.num_shards).remove_files(
                manifest.id, manifest.writer)
        except (OSError, CheckpointError, StoreError) as exc:
            log.warning("Resharding left the old checkpoint %s of shard %d of %d: %s",
                        manifest.id, manifest.shard, manifest.num_shards, exc)
