"""``elasticps reshard --pservers M``: commit a resharding from a role's environment, once.

The cluster path of ``elasticps scale JOB --pservers M`` runs this in a one-shot Kubernetes
Job made from the pserver pod template (same image, store, token, TLS and checkpoint volume),
after every old pserver pod is gone. It

1. reads the job's current shard count (``pserver/layout``, else ``PADDLE_NUM_PSERVERS``);
2. waits, at most ``wait_s``, until no pserver slot of that layout is held: a pserver that was
   killed rather than stopped keeps its slot until its lease expires (``PADDLE_LEASE_TTL``);
3. calls :func:`~elasticps.pserver.reshard.commit.commit_reshard`, which re-splits the newest
   checkpoints and publishes the new layout in one store transaction, or changes nothing.

A commit can fail after its transaction succeeded (removing the old layout's files or
manifests); the layout is then re-read, and a job that is at M shards under the generation this
run would have written counts as resharded, with a warning: the old files are only garbage.
A job already at M shards is left alone and counts as done, so that ``elasticps scale`` run
again after a reshard pod was killed between its commit and its exit goes on to start the M
pservers instead of failing.

:func:`current_layout` (``elasticps reshard --show-layout``) only reads: ``elasticps scale``
runs it in a one-shot Job whenever a resharding's outcome is in doubt, since it talks to the
API server alone and cannot reach the job's store. Both write the layout they leave
(:func:`write_layout_file`, the ``pserver/layout`` JSON) to the pod's termination message,
where the API server shows it in the pod's status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elasticps.config import Config
from elasticps.errors import ConfigError, ElasticPSError, FailedPreconditionError
from elasticps.pserver.reshard.commit import commit_reshard
from elasticps.store import Store, open_store
from elasticps.store.keys import (
    MAX_PSERVERS_IN_LAYOUT,
    PServerLayout,
    pserver_slot,
    read_pserver_layout,
)

log = logging.getLogger(__name__)

POLL_S = 0.5


@dataclass(frozen=True)
class LayoutChange:
    """What one ``elasticps reshard`` did."""

    old_shards: int
    new_shards: int
    generation: int
    summary: str  # one sentence for the Job's log


def held_slots(store: Store, shards: int) -> list[int]:
    return [i for i in range(shards) if store.get(pserver_slot(i)) is not None]


def wait_for_free_slots(store: Store, shards: int, wait_s: float, *,
                        say: Callable[[str], None], poll_s: float = POLL_S) -> None:
    """Return once no slot of ``shards`` is held; FailedPreconditionError after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    last: list[int] | None = None
    while busy := held_slots(store, shards):
        if busy != last:
            say(f"waiting up to {wait_s:g}s for pserver slot(s) {busy} of {shards} to be "
                "released (a stopped pserver releases its slot; a killed one's lease expires)")
            last = busy
        if time.monotonic() >= deadline:
            raise FailedPreconditionError(
                f"pserver slot(s) {busy} of {shards} are still held after {wait_s:g}s: a "
                "resharding needs every pserver of the job stopped; nothing changed")
        time.sleep(poll_s)  # the store's keys expire on its clock; nothing to wait on here


def _check_store(config: Config, why: str) -> str:
    if not config.store:
        raise ConfigError(f"PADDLE_STORE is not set: `elasticps reshard` {why} in the job's "
                          "store")
    return config.store


def current_layout(config: Config) -> PServerLayout:
    """The job's layout as pservers read it: ``pserver/layout``, else the count it was started
    with (PADDLE_NUM_PSERVERS) at generation 0. Changes nothing."""
    with open_store(_check_store(config, "reads the layout"), config.job_name) as store:
        layout = read_pserver_layout(store)
    return layout if layout is not None else PServerLayout(config.pserver_count, 0)


def write_layout_file(path: str, layout: PServerLayout) -> None:
    """Write ``layout`` as ``pserver/layout``'s JSON (``{"generation": G, "shards": S}``) to
    ``path``; OSError if it cannot be written."""
    Path(path).write_bytes(layout.encode())


def reshard(config: Config, new_shards: int, *, wait_s: float,
            say: Callable[[str], None]) -> LayoutChange:
    """Carry out one resharding of ``config``'s job to ``new_shards`` (module docstring)."""
    if not 1 <= new_shards <= MAX_PSERVERS_IN_LAYOUT:
        raise ConfigError(f"--pservers={new_shards} must be in [1, {MAX_PSERVERS_IN_LAYOUT}]")
    if wait_s < 0:
        raise ConfigError(f"--wait={wait_s:g} must be >= 0 seconds")
    store_url = _check_store(config, "commits the new layout")
    if not config.checkpoint_url:
        raise ConfigError("PADDLE_CHECKPOINT_URL is not set: a resharding re-splits the "
                          "pservers' checkpoints")
    with open_store(store_url, config.job_name) as store:
        layout = read_pserver_layout(store)
        old = layout.shards if layout is not None else config.pserver_count
        generation = (layout.generation if layout is not None else 0) + 1
        if old == new_shards:  # e.g. an earlier run committed, then was killed: say so, and
            # let `elasticps scale` start the M pservers, rather than strand the job at 0
            return LayoutChange(old, new_shards, generation - 1,
                                f"the job already has {old} pserver shards (generation "
                                f"{generation - 1}); nothing to do")
        wait_for_free_slots(store, old, wait_s, say=say)
        try:
            result = commit_reshard(store, config.checkpoint_url, config.pserver_count,
                                    new_shards, keep=config.checkpoint_keep)
        except ElasticPSError as exc:
            now = read_pserver_layout(store)
            if now is None or (now.shards, now.generation) != (new_shards, generation):
                raise
            log.warning("Job %s: the resharding to %d shards was committed, but tidying up "
                        "after it failed: %s", config.job_name, new_shards, exc)
            return LayoutChange(old, new_shards, generation,
                                f"resharded {old} -> {new_shards} pservers (generation "
                                f"{generation}); removing the old layout's checkpoints "
                                f"failed ({exc}), they are left as garbage")
    return LayoutChange(result.old_shards, result.new_shards, result.generation,
                        f"resharded {result.old_shards} -> {result.new_shards} pservers "
                        f"(generation {result.generation}, {result.rows} sparse rows; read "
                        f"{result.read_s:.2f}s, wrote {result.write_s:.2f}s)")
