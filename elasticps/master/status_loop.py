"""The loop behind the status page: every ``interval`` seconds the leading master looks at the
job (the queue, the trainers' progress, the pservers' metrics, the timeline), steps the pure
view (:mod:`elasticps.master.status_view`), records what it found in the timeline, and every few
ticks saves the page's document at ``job/history`` with a fenced write, so the page outlives
the job and a master that takes over continues the charts.

When it starts it reads the saved document; if another master wrote it and the job was not
over, this master took over from that one: a failover, recorded in the timeline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from elasticps.errors import ElasticPSError, StoreValueError
from elasticps.master.progressive import ProgressiveBoard
from elasticps.master.service import MasterState
from elasticps.master.status_document import carry_over, document
from elasticps.master.status_view import PServerSight, Sight, ViewMemory, step_view
from elasticps.store.api import Op, Put, Store
from elasticps.store.keys import (
    JOB_HISTORY,
    JobEvent,
    MetricsEndpoint,
    PServerSlot,
    encode_history,
    pserver_slot,
    read_events,
    read_history,
    read_metrics_endpoints,
    read_progress,
    read_pserver_layout,
    read_result,
    record_event,
    trim_events,
)
from elasticps.telemetry.scrape import scrape, total

log = logging.getLogger(__name__)

EVENTS_SHOWN = 300  # timeline entries in the document
EVENTS_KEPT = 2000  # timeline entries kept in the store
Commit = Callable[[Sequence[Op]], None]

_PULLS = ("PullDense", "PullSparse")
# What the page reads of a pserver's metrics: figure -> (sample name, labels it must have).
# The one place that names them; a sample's other labels (job, shard, node) may be anything.
PSERVER_FIGURES: dict[str, tuple[str, dict[str, str | tuple[str, ...]]]] = {
    "rows": ("elasticps_pserver_table_rows", {}),
    "bytes": ("elasticps_pserver_table_bytes", {}),
    "checkpoint_age_s": ("elasticps_pserver_checkpoint_age_seconds", {}),
    "push_rate": ("elasticps_pserver_pushes_per_second", {}),
    "duplicates": ("elasticps_pserver_duplicates_total", {}),
    "push_seconds": ("elasticps_pserver_rpc_seconds_sum", {"method": "Push"}),
    "push_count": ("elasticps_pserver_rpc_seconds_count", {"method": "Push"}),
    "pull_seconds": ("elasticps_pserver_rpc_seconds_sum", {"method": _PULLS}),
    "pull_count": ("elasticps_pserver_rpc_seconds_count", {"method": _PULLS}),
    "cpu_seconds": ("process_cpu_seconds_total", {}),
    "memory_bytes": ("process_resident_memory_bytes", {}),
}


class StatusLoop:
    """Ticks until ``halt`` is set; :meth:`document` is what ``/api/status`` serves."""

    def __init__(self, store: Store, state: MasterState, *, num_pservers: int, commit: Commit,
                 halt: threading.Event, interval: float = 2.0, save_every: int = 5,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.state = state
        self.num_pservers = num_pservers
        self.commit = commit
        self.halt = halt
        self.interval = interval
        self.save_every = save_every
        self.clock = clock
        self._saved: dict[str, Any] = {}
        self.progressive = ProgressiveBoard(store)
        # replaced whole by each tick, so a reader never sees half of one
        self._view: tuple[ViewMemory, Sight | None, list[JobEvent]] = (ViewMemory(), None, [])

    # -- what the HTTP server serves --------------------------------------------------------

    def document(self) -> dict[str, Any]:
        memory, sight, events = self._view
        doc = document(self.state.status(), memory, sight, events=events, now=self.clock())
        return carry_over(self._saved, doc) if sight is None else doc

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self.resume()
        while True:
            self._tick_quietly()
            if self.halt.wait(self.interval):
                break
        self._tick_quietly()  # the last look: how the job ended
        self.save()

    def _tick_quietly(self) -> None:
        try:
            self.tick()
        except ElasticPSError as exc:
            log.warning("Master %s of job %s could not refresh its status page: %s",
                        self.state.node, self.state.job, exc)

    def resume(self) -> None:
        """Continue from the saved document; record a failover if this master took over."""
        try:
            saved = read_history(self.store)
        except (ElasticPSError, StoreValueError) as exc:
            log.warning("Master %s of job %s ignores the saved status page: %s",
                        self.state.node, self.state.job, exc)
            saved = None
        if saved is None:
            return
        self._saved = saved
        memory = ViewMemory.from_document(saved)
        restored = [f for f in (_event_fields(e) for e in saved["events"]) if f is not None]
        self._view = (memory, None, [JobEvent(**f) for f in restored])
        previous = saved.get("master")
        if previous and previous != self.state.node and saved.get("state") not in (
                "succeeded", "failed"):
            self._view = (replace(memory, failovers=memory.failovers + 1), *self._view[1:])
            self._record([JobEvent(
                "failover", "master",
                f"master {self.state.node} took over from {previous} (pass "
                f"{_pass_text(saved.get('pass'))})", self.state.node, self.clock())])

    def tick(self) -> None:
        memory, _, events = self._view
        sight = self._look()
        memory, found = step_view(memory, sight)
        self._record(found)
        events = [*(sight.events or events), *found][-EVENTS_SHOWN:]
        self._view = (memory, sight, events)
        if (memory.ticks - 1) % self.save_every == 0:  # the first tick, then every save_every
            self.save()
        if memory.ticks % 150 == 0:
            trim_events(self.store, EVENTS_KEPT)

    def save(self) -> None:
        """Write the document at ``job/history`` (fenced: only the leader writes it)."""
        if self._view[1] is None:
            return
        doc = persistable(self.document())
        try:
            self.commit([Put(JOB_HISTORY, encode_history(doc))])
        except (ElasticPSError, ValueError) as exc:
            log.warning("Master %s of job %s could not save its status page: %s",
                        self.state.node, self.state.job, exc)

    def _record(self, events: list[JobEvent]) -> None:
        for event in events:
            log.info("Job %s: %s", self.state.job, event.message)
            try:
                record_event(self.store, event)
            except ElasticPSError as exc:
                log.warning("Master %s of job %s could not record %r: %s", self.state.node,
                            self.state.job, event.message, exc)

    def _look(self) -> Sight:
        store = self.store
        endpoints = read_metrics_endpoints(store)
        by_name = {(e.role, e.name): e for e in endpoints}
        layout = read_pserver_layout(store)  # a resharded job has its own count
        count = layout.shards if layout is not None else self.num_pservers
        pservers = [self._pserver(i, by_name.get(("pserver", f"pserver-{i}")))
                    for i in range(count)]
        return Sight(now=self.clock(), node=self.state.node, status=self.state.status(),
                     progress=read_progress(store), pservers=pservers, endpoints=endpoints,
                     events=read_events(store, EVENTS_SHOWN), result=self._result(),
                     progressive=self.progressive.look(self.state.stream_partitions()))

    def _result(self) -> dict[str, Any] | None:
        try:
            return read_result(self.store)
        except StoreValueError:
            return None

    def _pserver(self, shard: int, endpoint: MetricsEndpoint | None) -> PServerSight:
        kv = self.store.get(pserver_slot(shard))
        slot = None
        if kv is not None:
            try:
                slot = PServerSlot.decode(kv.value, kv.key)
            except StoreValueError:
                slot = None
        if endpoint is None:
            return PServerSight(shard, slot)
        samples = scrape(endpoint.url)
        if samples is None:
            return PServerSight(shard, slot)
        figures = {figure: total(samples, name, **labels)
                   for figure, (name, labels) in PSERVER_FIGURES.items()}
        return PServerSight(shard, slot, {"t": self.clock(), **{
            k: v for k, v in figures.items() if v is not None}})


def persistable(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as saved: the reconciliations' per-task and per-shard detail is left out
    (a 100,000-task job would otherwise save megabytes every few seconds)."""
    out = dict(doc)
    out["accounting"] = [{k: v for k, v in acc.items() if k not in ("batches", "shards")}
                         for acc in doc.get("accounting") or [] if isinstance(acc, dict)]
    return out


def _event_fields(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    try:
        return {"kind": str(raw["kind"]), "subject": str(raw["subject"]),
                "message": str(raw["message"]), "source": str(raw.get("source", "")),
                "time": float(raw["time"])}
    except (KeyError, TypeError, ValueError):
        return None


def _pass_text(pass_id: Any) -> str:
    return f"{pass_id + 1}" if isinstance(pass_id, int) else "?"
