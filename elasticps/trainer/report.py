"""What trainers publish in the store for the launcher and the status line.

Keys (relative to the job prefix):

- ``job/progress/<trainer>``: ``{"pass", "samples", "loss", "time"}``, refreshed every few
  seconds by each trainer (``loss`` is a moving average); the launcher's progress line sums
  samples and averages losses over trainers.
- ``job/result``: the job's final result document, written once by the trainer the master let
  save the model (``auc``, ``best_auc``, ``logloss``, ``model_dir``, ...). The launcher copies it
  into ``WORKDIR/summary.json`` with its own ``wall_s`` and ``samples_per_sec``.
- ``job/once/<name>/lock`` and ``job/once/<name>/done``: :func:`run_once`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from elasticps.errors import StoreError
from elasticps.store.api import Compare, EventType, Put, Store

log = logging.getLogger(__name__)

PROGRESS_PREFIX = "job/progress/"
RESULT_KEY = "job/result"


def publish_progress(store: Store, trainer: str, doc: dict[str, Any]) -> None:
    store.put(PROGRESS_PREFIX + trainer, json.dumps(doc, sort_keys=True).encode())


def read_progress(store: Store) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kv in store.get_prefix(PROGRESS_PREFIX):
        try:
            out[kv.key.removeprefix(PROGRESS_PREFIX)] = json.loads(kv.value)
        except ValueError:
            continue
    return out


def publish_result(store: Store, doc: dict[str, Any]) -> None:
    store.put(RESULT_KEY, json.dumps(doc, sort_keys=True).encode())


def read_result(store: Store) -> dict[str, Any] | None:
    kv = store.get(RESULT_KEY)
    if kv is None:
        return None
    doc = json.loads(kv.value)
    return doc if isinstance(doc, dict) else None


def run_once(store: Store, name: str, fn: Callable[[], bytes], *, owner: str,
             timeout: float = 600.0) -> bytes:
    """Run ``fn`` in exactly one process of the job; every caller gets its result (bytes).

    The first caller to create ``job/once/<name>/lock`` runs ``fn`` and publishes its result
    under ``.../done``; the others wait for it. If the winner dies before publishing, the job
    fails visibly (a timeout naming the owner) rather than running ``fn`` twice.
    """
    lock, done = f"job/once/{name}/lock", f"job/once/{name}/done"
    won = store.txn([Compare.missing(lock)], [Put(lock, owner.encode())]).succeeded
    if won:
        log.info("%s runs the one-time step %r for the job.", owner, name)
        value = fn()
        store.put(done, value)
        return value
    deadline = time.monotonic() + timeout
    revision = store.revision()
    kv = store.get(done)
    if kv is not None:
        return kv.value
    with store.watch_prefix(done, start_revision=revision + 1) as watch:
        while (remaining := deadline - time.monotonic()) > 0:
            event = watch.get(timeout=remaining)
            if event is not None and event.key == done and event.type is EventType.PUT:
                return event.value
    holder = store.get(lock)
    who = holder.value.decode(errors="replace") if holder else "?"
    raise StoreError(f"one-time step {name!r} run by {who} did not finish within {timeout:.0f}s")
