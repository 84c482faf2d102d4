"""What the status page shows, decided purely: one :func:`step_view` per tick turns what the
master sees now (:class:`Sight`) and what it remembered (:class:`ViewMemory`) into the next
memory and the timeline entries to record; ``status_document.py`` makes the page's document
from them.

No I/O and no clock here (time is an argument): ``master/status_loop.py`` gathers a
``Sight`` from the queue, the store and the pservers' metrics, and carries the results out.
The memory is saved inside the document (its ``observer`` field, a name saved documents
already carry), so a master that takes over continues the charts and the timeline where the
last one left them, and ``elasticps ui`` serves a finished job's page from the same document.

Timeline entries decided here: a pass starts, the job ends, a task goes FAILED (with its
reason), a pass is reconciled (or needs recovery dispatches), a trainer joins or leaves, and a
pserver slot or a trainer index comes back as a new process (a restart).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticps.store.keys import JobEvent, MetricsEndpoint, PServerSlot, TrainerProgress

MAX_POINTS = 720  # chart points kept; past that the series halves its resolution
FRESH_S = 6.0  # a trainer's samples/s counts while its progress is younger than this
MAX_SEEN = 5000  # failed-task keys remembered (so an old failure is not announced twice)
MAX_TRAINER_SERIES = 16  # trainers charted one by one (more lines than that are unreadable)
_TRAINER_ID = re.compile(r"^(trainer-(\d+))(?:-|$)")


def trainer_slot(name: str) -> str:
    """``trainer-<id>`` of a trainer process name (``trainer-3-host-4711`` -> ``trainer-3``)."""
    match = _TRAINER_ID.match(name)
    return match.group(1) if match else name


def trainer_index(name: str) -> int | None:
    """The index in a trainer's name or slot (``trainer-3-host-4711``, ``trainer-3`` -> 3)."""
    match = _TRAINER_ID.match(name)
    return int(match.group(2)) if match else None


@dataclass(frozen=True)
class PServerSight:
    """One pserver slot as seen now: its store record and its scraped metrics (None: down or
    not scraped). The metrics are the raw figures of ``status_loop.PSERVER_FIGURES`` plus
    ``t``, the time they were scraped; :func:`pserver_figures` derives the rates from two."""

    shard: int
    slot: PServerSlot | None
    metrics: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Sight:
    """Everything one tick looks at."""

    now: float
    node: str
    status: Mapping[str, Any]  # MasterState.status()
    progress: Mapping[str, TrainerProgress]
    pservers: Sequence[PServerSight] = ()
    endpoints: Sequence[MetricsEndpoint] = ()
    events: Sequence[JobEvent] = ()
    result: Mapping[str, Any] | None = None  # job/result: the job's final metrics
    # a stream's progressive validation per partition (master/progressive.py)
    progressive: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class ViewMemory:
    """What the view remembers between ticks (and across leaders, inside the document)."""

    started: float = 0.0
    series: tuple[dict[str, Any], ...] = ()
    stride: int = 1  # a point every `stride` ticks (doubles when the series halves)
    ticks: int = 0
    incarnations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    failed_seen: frozenset[str] = frozenset()
    reconciled_seen: frozenset[str] = frozenset()
    live_trainers: frozenset[str] = frozenset()
    # the last figures of each pserver shard (scraped and derived), shown (greyed) once it is
    # down
    pserver_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    pass_id: int | None = None
    failovers: int = 0  # takeovers so far (the timeline keeps only its newest entries)
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"started": self.started, "stride": self.stride, "ticks": self.ticks,
                "incarnations": {k: list(v) for k, v in self.incarnations.items()},
                "failed_seen": sorted(self.failed_seen),
                "reconciled_seen": sorted(self.reconciled_seen),
                "live_trainers": sorted(self.live_trainers), "pass": self.pass_id,
                "pserver_metrics": {k: dict(v) for k, v in self.pserver_metrics.items()},
                "state": self.state, "failovers": self.failovers}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> ViewMemory:
        """The memory a saved document carries (a malformed part starts afresh)."""
        mem = doc.get("observer") if isinstance(doc.get("observer"), dict) else {}
        assert isinstance(mem, dict)
        series = tuple(p for p in doc.get("series") or [] if isinstance(p, dict))
        incarnations = mem.get("incarnations") if isinstance(mem.get("incarnations"), dict) \
            else {}
        assert isinstance(incarnations, dict)
        return cls(
            started=_float(mem.get("started")) or 0.0, series=series,
            stride=max(1, int(_float(mem.get("stride")) or 1)),
            ticks=int(_float(mem.get("ticks")) or 0),
            incarnations={str(k): tuple(str(x) for x in v) for k, v in incarnations.items()
                          if isinstance(v, list)},
            failed_seen=frozenset(str(x) for x in mem.get("failed_seen") or []),
            reconciled_seen=frozenset(str(x) for x in mem.get("reconciled_seen") or []),
            live_trainers=frozenset(str(x) for x in mem.get("live_trainers") or []),
            pserver_metrics=_metrics_by_shard(mem.get("pserver_metrics")),
            pass_id=mem.get("pass") if isinstance(mem.get("pass"), int) else None,
            state=mem.get("state") if isinstance(mem.get("state"), str) else None,
            failovers=int(_float(mem.get("failovers")) or 0))


def _metrics_by_shard(value: Any) -> dict[str, dict[str, float]]:
    if not isinstance(value, dict):
        return {}
    return {str(shard): {str(k): float(v) for k, v in m.items() if _float(v) is not None}
            for shard, m in value.items() if isinstance(m, dict)}


def _float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# -- the tick --------------------------------------------------------------------------------


def step_view(memory: ViewMemory, sight: Sight) -> tuple[ViewMemory, list[JobEvent]]:
    """The next memory and the timeline entries this tick found."""
    status = sight.status
    events: list[JobEvent] = []
    live = frozenset(str(t) for t in status.get("live_trainers") or [])
    events += _trainer_events(memory, live, sight)
    incarnations, restarts = _incarnations(memory, sight)
    events += restarts
    failed_seen, failed = _failed_tasks(memory, status, sight)
    events += failed
    reconciled_seen, reconciled = _reconciliations(memory, status, sight)
    events += reconciled
    events += _pass_and_state(memory, status, sight)
    rate = samples_rate(sight.progress, live, sight.now)
    series, stride = list(memory.series), memory.stride
    if memory.ticks % stride == 0 and status.get("pass") is not None:
        series.append(_point(sight, rate, live))
        if len(series) > MAX_POINTS:
            series, stride = series[::2], stride * 2
    pass_id = status.get("pass")
    return ViewMemory(
        started=memory.started or sight.now, series=tuple(series), stride=stride,
        ticks=memory.ticks + 1,
        incarnations=incarnations, failed_seen=failed_seen, reconciled_seen=reconciled_seen,
        live_trainers=live, pserver_metrics={
            **memory.pserver_metrics,
            **{str(ps.shard): pserver_figures(memory.pserver_metrics.get(str(ps.shard)),
                                              ps.metrics)
               for ps in sight.pservers if ps.metrics}},
        pass_id=pass_id if isinstance(pass_id, int) else memory.pass_id,
        state=str(status.get("state")) if status.get("state") else memory.state,
        failovers=memory.failovers,
    ), events


def _event(sight: Sight, kind: str, subject: str, message: str) -> JobEvent:
    return JobEvent(kind, subject, message, sight.node, sight.now)


def _trainer_events(memory: ViewMemory, live: frozenset[str], sight: Sight) -> list[JobEvent]:
    if memory.ticks == 0 and not memory.live_trainers:
        before: frozenset[str] = frozenset()
    else:
        before = memory.live_trainers
    out = [_event(sight, "trainer", trainer_slot(name), f"{name} joined the job")
           for name in sorted(live - before)]
    gone = "left the job after the last pass" if sight.status.get("state") == "succeeded" \
        else "left the job (its tasks, if any, went back to todo)"
    out += [_event(sight, "trainer", trainer_slot(name), f"{name} {gone}")
            for name in sorted(before - live)]
    return out


def _incarnations(memory: ViewMemory, sight: Sight
                  ) -> tuple[dict[str, tuple[str, ...]], list[JobEvent]]:
    """Which process each pserver slot and trainer index has had; a new one is a restart."""
    seen = {k: tuple(v) for k, v in memory.incarnations.items()}
    events: list[JobEvent] = []
    current: dict[str, tuple[str, str]] = {}  # subject -> (process, what)
    for ps in sight.pservers:
        if ps.slot is not None:
            current[f"pserver-{ps.shard}"] = (f"pid {ps.slot.pid} on {ps.slot.host}",
                                              f"at {ps.slot.address}")
    newest: dict[str, tuple[float, str]] = {}
    for name, progress in sight.progress.items():
        slot = trainer_slot(name)
        if progress.time >= newest.get(slot, (-1.0, ""))[0]:
            newest[slot] = (progress.time, name)
    for slot, (_, name) in newest.items():
        current[slot] = (name, "")
    for subject, (process, where) in sorted(current.items()):
        known = seen.get(subject, ())
        if process in known:
            continue
        if known:
            what = "pserver slot" if subject.startswith("pserver-") else "trainer"
            events.append(_event(sight, "restart", subject,
                                 f"{what} {subject} came back as {process} {where}".rstrip()
                                 + f" (restart {len(known)})"))
        seen[subject] = (*known, process)
    return seen, events


def _failed_tasks(memory: ViewMemory, status: Mapping[str, Any], sight: Sight
                  ) -> tuple[frozenset[str], list[JobEvent]]:
    seen = set(memory.failed_seen)
    events = []
    for entry in status.get("failure_log") or []:
        key = f"{entry.get('pass')}-{entry.get('task')}"
        if key in seen:
            continue
        seen.add(key)
        events.append(_event(sight, "task_failed", f"task {entry.get('task')}",
                             f"task {entry.get('task')} failed in {pass_name(entry.get('pass'))}"
                             f": {entry.get('reason')}"))
    if len(seen) > MAX_SEEN:
        seen = set(sorted(seen)[-MAX_SEEN:])
    return frozenset(seen), events


def _reconciliations(memory: ViewMemory, status: Mapping[str, Any], sight: Sight
                     ) -> tuple[frozenset[str], list[JobEvent]]:
    seen = set(memory.reconciled_seen)
    events = []
    for acc in status.get("accounting") or []:
        missing = acc.get("missing_tasks") or {}
        lost = sum(len(v) for v in missing.values())
        key = f"{acc.get('pass')}:{acc.get('complete')}:{lost}:{sorted(missing)}"
        if key in seen:
            continue
        seen.add(key)
        name = pass_name(acc.get("pass"))
        if acc.get("complete"):
            events.append(_event(sight, "reconciled", name,
                                 f"{name} reconciled: every pserver shard holds all "
                                 f"{acc.get('expected_batches')} batches"))
        else:
            events.append(_event(sight, "recovery", name,
                                 f"{name}: pserver shards miss {lost} batch(es) of "
                                 f"{_listing(missing)}; recovery dispatches recompute them"))
    return frozenset(seen), events


def pass_name(pass_id: Any) -> str:
    """How people count passes: ``pass 1`` is pass id 0."""
    return f"pass {pass_id + 1}" if isinstance(pass_id, int) else "pass ?"


def _listing(tasks: Mapping[str, Any], shown: int = 8) -> str:
    ids = sorted(tasks, key=lambda t: int(t) if t.isdigit() else -1)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"task{'s' if len(ids) > 1 else ''} {', '.join(ids[:shown])}{more}"


def _pass_and_state(memory: ViewMemory, status: Mapping[str, Any], sight: Sight
                    ) -> list[JobEvent]:
    events = []
    pass_id = status.get("pass")
    if isinstance(pass_id, int) and pass_id != memory.pass_id and (
            memory.pass_id is None or pass_id > memory.pass_id):
        events.append(_event(sight, "pass", pass_name(pass_id),
                             f"{pass_name(pass_id)} of {status.get('num_passes')} started"))
    state = status.get("state")
    if state in ("succeeded", "failed") and state != memory.state:
        reason = status.get("job_failed_reason")
        # The master knows the training; the trainers' scripts may go on (and fail) after it.
        said = "every pass is done: training succeeded" if state == "succeeded" \
            else f"the job failed: {reason}" if reason else "the job failed"
        events.append(_event(sight, "job", str(status.get("job")), said))
    return events


def samples_rate(progress: Mapping[str, TrainerProgress], live: frozenset[str],
                 now: float) -> float:
    """The job's samples/s: each live trainer's own rate over its last publishing interval,
    while that is fresh (a trainer that stopped publishing, say blocked in a handler, adds 0).
    Trainers publish every 2 s, so differencing their sample counts at another period would
    alias; their own rates do not."""
    return sum(p.samples_per_s for name, p in progress.items()
               if name in live and now - p.time <= FRESH_S)


def _point(sight: Sight, rate: float, live: frozenset[str]) -> dict[str, Any]:
    losses = [p.loss for n, p in sight.progress.items() if n in live and p.loss is not None]
    point = {"t": round(sight.now, 3),
             "samples_per_s": round(rate, 3),
             "loss": round(sum(losses) / len(losses), 6) if losses else None,
             "progress": round(job_fraction(sight.status), 6),
             "pass": sight.status.get("pass"), "trainers": len(live)}
    return {**point, **_per_trainer(sight, live)}


def _per_trainer(sight: Sight, live: frozenset[str]) -> dict[str, Any]:
    """Each live trainer's samples/s and loss, by trainer index (a fresh record only; at most
    :data:`MAX_TRAINER_SERIES` trainers, so a large job's document stays small)."""
    fresh = {trainer_slot(n): p for n, p in sight.progress.items()
             if n in live and sight.now - p.time <= FRESH_S}
    if not fresh or len(fresh) > MAX_TRAINER_SERIES:
        return {}
    return {"trainer_samples_per_s": {s: round(p.samples_per_s, 3)
                                      for s, p in sorted(fresh.items())},
            "trainer_loss": {s: round(p.loss, 6) for s, p in sorted(fresh.items())
                             if p.loss is not None}}


def job_fraction(status: Mapping[str, Any]) -> float:
    """How much of the whole job (every pass) is done, 0..1: finished tasks, plus the share
    of the pending ones that their trainers have reported done."""
    if status.get("state") == "succeeded":
        return 1.0
    tasks, passes = status.get("num_tasks"), status.get("num_passes")
    pass_id, counts = status.get("pass"), status.get("counts") or {}
    if not isinstance(tasks, int) or not isinstance(passes, int) or not isinstance(pass_id, int) \
            or tasks <= 0 or passes <= 0:
        return 0.0
    running = _float(status.get("running_share")) or 0.0
    done = int(counts.get("done", 0)) + int(counts.get("failed", 0)) + running
    return min(1.0, (pass_id * tasks + done) / (passes * tasks))


def pserver_figures(before: Mapping[str, float] | None, now: Mapping[str, float]
                    ) -> dict[str, float]:
    """A shard's figures: the scraped ones, plus the mean push and pull latency (ms) and the
    CPU share (% of one core) since the scrape ``before``. A latency with no call since keeps
    its last value (an idle shard is not faster, it is idle)."""
    out = dict(now)
    before = before or {}
    for kind in ("push", "pull"):
        calls = now.get(f"{kind}_count", 0.0) - before.get(f"{kind}_count", 0.0)
        seconds = now.get(f"{kind}_seconds", 0.0) - before.get(f"{kind}_seconds", 0.0)
        if before and calls > 0 and seconds >= 0:
            out[f"{kind}_ms"] = 1e3 * seconds / calls
        elif f"{kind}_ms" in before:
            out[f"{kind}_ms"] = before[f"{kind}_ms"]
    elapsed = now.get("t", 0.0) - before.get("t", 0.0)
    cpu = now.get("cpu_seconds", 0.0) - before.get("cpu_seconds", 0.0)
    if before and elapsed > 0 and cpu >= 0 and "cpu_seconds" in now:
        out["cpu_percent"] = 100.0 * cpu / elapsed
    elif "cpu_percent" in before:
        out["cpu_percent"] = before["cpu_percent"]
    return out




__all__ = ["PServerSight", "Sight", "ViewMemory", "job_fraction", "pserver_figures",
           "samples_rate", "step_view", "trainer_slot"]
