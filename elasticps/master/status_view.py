"""What the status page shows, decided purely: one :func:`step_view` per tick turns what the
master sees now (:class:`Sight`) and what it remembered (:class:`ViewMemory`) into the next
memory, the timeline entries to record, and the page's document (:func:`document`).

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
ETA_WINDOW_S = 120.0  # progress rate over this much recent history
FRESH_S = 6.0  # a trainer's samples/s counts while its progress is younger than this
MAX_SEEN = 5000  # failed-task keys remembered (so an old failure is not announced twice)
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
    not scraped)."""

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
    # the last metrics scraped from each pserver shard, shown (greyed) once it is down
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
            **{str(ps.shard): dict(ps.metrics) for ps in sight.pservers if ps.metrics}},
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
    out += [_event(sight, "trainer", trainer_slot(name),
                   f"{name} left the job (its tasks, if any, went back to todo)")
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
        events.append(_event(sight, "job", str(status.get("job")),
                             f"the job {state}" + (f": {reason}" if reason else "")))
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
    return {"t": round(sight.now, 3),
            "samples_per_s": round(rate, 3),
            "loss": round(sum(losses) / len(losses), 6) if losses else None,
            "progress": round(job_fraction(sight.status), 6),
            "pass": sight.status.get("pass"), "trainers": len(live)}


# -- the document ------------------------------------------------------------------------------


def job_fraction(status: Mapping[str, Any]) -> float:
    """How much of the whole job (every pass) is done, 0..1."""
    if status.get("state") == "succeeded":
        return 1.0
    tasks, passes = status.get("num_tasks"), status.get("num_passes")
    pass_id, counts = status.get("pass"), status.get("counts") or {}
    if not isinstance(tasks, int) or not isinstance(passes, int) or not isinstance(pass_id, int) \
            or tasks <= 0 or passes <= 0:
        return 0.0
    done = int(counts.get("done", 0)) + int(counts.get("failed", 0))
    return min(1.0, (pass_id * tasks + done) / (passes * tasks))


def eta_seconds(series: Sequence[Mapping[str, Any]], fraction: float) -> float | None:
    """Seconds left at the progress rate of the last :data:`ETA_WINDOW_S` (None: no rate)."""
    if fraction >= 1.0:
        return 0.0
    points = [p for p in series if isinstance(p.get("progress"), int | float)]
    if len(points) < 2:
        return None
    last = points[-1]
    window = [p for p in points if last["t"] - p["t"] <= ETA_WINDOW_S]
    first = window[0] if len(window) >= 2 else points[-2]
    dt, df = last["t"] - first["t"], last["progress"] - first["progress"]
    if dt <= 0 or df <= 0:
        return None
    return round((1.0 - fraction) / (df / dt), 1)


def pass_metrics(progress: Mapping[str, TrainerProgress]) -> list[dict[str, Any]]:
    """Per pass, each metric averaged over the trainers that reported that pass."""
    sums: dict[int, dict[str, list[float]]] = {}
    for record in progress.values():
        for pass_key, metrics in record.pass_metrics.items():
            if not pass_key.lstrip("-").isdigit():
                continue
            per = sums.setdefault(int(pass_key), {})
            for name, value in metrics.items():
                per.setdefault(name, []).append(value)
    return [{"pass": p, **{k: round(sum(v) / len(v), 6) for k, v in sorted(m.items())}}
            for p, m in sorted(sums.items())]


def trainer_rows(status: Mapping[str, Any], progress: Mapping[str, TrainerProgress],
                 incarnations: Mapping[str, Sequence[str]], now: float) -> list[dict[str, Any]]:
    """One row per trainer index: its newest process, its tasks, speed, restarts, last seen."""
    live = set(status.get("live_trainers") or [])
    pending = status.get("pending") or {}
    by_slot: dict[str, list[tuple[str, TrainerProgress | None]]] = {}
    for name, known in progress.items():
        by_slot.setdefault(trainer_slot(name), []).append((name, known))
    for name in live:
        if name not in progress:
            by_slot.setdefault(trainer_slot(name), []).append((name, None))
    rows = []
    for slot, procs in by_slot.items():
        name, record = max(procs, key=lambda p: (p[0] in live, p[1].time if p[1] else now))
        alive = name in live
        tasks = [t for n, _ in procs for t in pending.get(n, [])]
        rows.append({
            "name": slot, "process": name, "live": alive, "tasks": tasks,
            "pass": record.pass_id if record else None,
            "samples": sum(r.samples for _, r in procs if r is not None),
            "samples_per_s": round(record.samples_per_s, 1) if record and alive else 0.0,
            "loss": record.loss if record else None,
            "restarts": max(0, len(incarnations.get(slot, ())) - 1),
            "last_seen_s": round(max(0.0, now - record.time), 1) if record and record.time
            else None,
        })
    return sorted(rows, key=lambda r: _natural(r["name"]))


def pserver_rows(pservers: Sequence[PServerSight], incarnations: Mapping[str, Sequence[str]],
                 last: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """One row per shard: its process and its metrics (the last ones scraped while it is down
    or was not scraped this time)."""
    rows = []
    for ps in sorted(pservers, key=lambda p: p.shard):
        m = ps.metrics or last.get(str(ps.shard)) or {}
        rows.append({
            "shard": ps.shard, "name": f"pserver-{ps.shard}", "up": ps.slot is not None,
            "address": ps.slot.address if ps.slot else None,
            "pid": ps.slot.pid if ps.slot else None, "host": ps.slot.host if ps.slot else None,
            "rows": _int(m.get("rows")), "bytes": _int(m.get("bytes")),
            "checkpoint_age_s": _round(m.get("checkpoint_age_s")),
            "push_rate": _round(m.get("push_rate")),
            "duplicates": _int(m.get("duplicates")),
            "restarts": max(0, len(incarnations.get(f"pserver-{ps.shard}", ())) - 1),
        })
    return rows


def metrics_urls(endpoints: Sequence[MetricsEndpoint]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for endpoint in endpoints:
        out.setdefault(endpoint.role, {})[endpoint.name] = endpoint.url
    return out


def document(status: Mapping[str, Any], memory: ViewMemory, sight: Sight | None, *,
             events: Sequence[JobEvent], now: float, live: bool = True) -> dict[str, Any]:
    """The ``/api/status`` document: the queue's status plus what the page draws."""
    doc = dict(status)
    progress = sight.progress if sight else {}
    fraction = job_fraction(status)
    series = list(memory.series)
    last = series[-1] if series else {}
    losses = [p["loss"] for p in series if p.get("loss") is not None]
    num_tasks = status.get("num_tasks") or 0
    doc.update({
        "live": live,
        "updated": round(now, 3),
        "started": round(memory.started, 3) if memory.started else None,
        "progress": {"fraction": round(fraction, 4),
                     "tasks_done": int((status.get("counts") or {}).get("done", 0)),
                     "tasks_total": num_tasks,
                     "eta_s": eta_seconds(series, fraction),
                     "elapsed_s": round(now - memory.started, 1) if memory.started else None},
        "samples_total": sum(p.samples for p in progress.values()),
        "samples_per_s": last.get("samples_per_s"),
        "loss": losses[-1] if losses else None,  # the last known (no trainer is left at the end)
        "series": series,
        "pass_metrics": pass_metrics(progress),
        "trainers": trainer_rows(status, progress, memory.incarnations, now),
        "pservers": pserver_rows(sight.pservers if sight else (), memory.incarnations,
                                 memory.pserver_metrics),
        "metrics_urls": metrics_urls(sight.endpoints if sight else ()),
        "failovers_total": memory.failovers,
        "events": [e.as_dict() for e in events],
        "observer": memory.as_dict(),
    })
    return doc


def carry_over(saved: Mapping[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """Keep what a saved document knew that a fresh one cannot (before the first tick of a new
    leader): its pass metrics, trainers and pservers rows."""
    for key in ("pass_metrics", "trainers", "pservers"):
        if not fresh.get(key) and saved.get(key):
            fresh[key] = saved[key]
    return fresh


def offline(doc: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A saved document served when no master runs (``elasticps ui``): marked not live, and
    nothing in it is running any more."""
    out = dict(doc)
    out["live"] = False
    out["trainers"] = [replace_row(r, live=False, samples_per_s=0.0)
                       for r in doc.get("trainers") or [] if isinstance(r, dict)]
    out["served"] = round(now, 3)
    return out


def replace_row(row: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    return {**row, **changes}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


__all__ = ["PServerSight", "Sight", "ViewMemory", "document", "eta_seconds", "job_fraction",
           "pass_metrics", "step_view"]
