"""The status page's document (``/api/status``), made purely from the queue's status, the view's
memory and the last :class:`~elasticps.master.status_view.Sight`: the progress and its ETA, a
row per trainer index and per pserver shard with the state each is in, what the trainers say
they are doing (their stages), and the job's final metrics.

A finished job's document is served again by ``elasticps ui`` (:func:`offline`); the states of
its rows follow how the job ended, so a job that succeeded shows its trainers *finished* and its
pservers *stopped*, not gone or down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elasticps.master.status_view import (
    FRESH_S,
    PServerSight,
    Sight,
    ViewMemory,
    job_fraction,
    trainer_slot,
)
from elasticps.store.keys import JobEvent, MetricsEndpoint, TrainerProgress

RATE_WINDOW_S = 60.0  # the ETA's samples/s: the mean over this much recent history
OVER = ("succeeded", "failed", "interrupted")  # the states a job ends in


def eta_seconds(status: Mapping[str, Any], fraction: float,
                series: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds left: the records left (of every pass, the running tasks' done part counted)
    at the mean samples/s of the last :data:`RATE_WINDOW_S`. It moves within a task, as the
    trainers report records. 0 once the job succeeded; None when it failed or nothing trains."""
    if status.get("state") == "succeeded":
        return 0.0
    if status.get("state") in OVER:
        return None
    per_pass, passes = status.get("records_per_pass"), status.get("num_passes")
    rate = recent_rate(series)
    if not isinstance(per_pass, int) or not isinstance(passes, int) or not rate:
        return None
    return round((1.0 - fraction) * per_pass * passes / rate, 1)


def recent_rate(series: Sequence[Mapping[str, Any]]) -> float | None:
    """The mean samples/s of the points of the last :data:`RATE_WINDOW_S` (None: none)."""
    points = [p for p in series if isinstance(p.get("samples_per_s"), int | float)]
    if not points:
        return None
    window = [p for p in points if points[-1]["t"] - p["t"] <= RATE_WINDOW_S]
    rate = sum(p["samples_per_s"] for p in window) / len(window)
    return rate if rate > 0 else None


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


def stages(progress: Mapping[str, TrainerProgress], live: Sequence[str]) -> dict[str, str]:
    """What each live trainer (by index) says it is doing outside training."""
    return {trainer_slot(name): record.stage for name, record in sorted(progress.items())
            if name in live and record.stage}


def activity(status: Mapping[str, Any], said: Mapping[str, str]) -> str | None:
    """The job's stage in words: a stream stopped at a partition it refuses, else the
    trainers' stages (``exporting (trainer-1)``), else ``starting`` before a trainer named the
    dataset, else a stream's wait for data, else None (the state says it)."""
    stream = status.get("stream")
    stream = stream if isinstance(stream, Mapping) and status.get("state") not in OVER else {}
    if stream.get("refused"):
        return f"the stream stops: {stream['refused']}"
    by_stage: dict[str, list[str]] = {}
    for slot, stage in said.items():
        by_stage.setdefault(stage, []).append(slot)
    if by_stage:
        return "; ".join(f"{stage} ({', '.join(slots)})" for stage, slots in by_stage.items())
    if status.get("state") == "waiting_for_dataset":
        return "starting"
    if stream.get("waiting_for_data") and not status.get("reconciling"):
        return "waiting for the stream's next partition"
    return None


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
        fresh = record is not None and alive and now - record.time <= FRESH_S
        rows.append({
            "name": slot, "process": name, "live": alive, "tasks": tasks,
            "pass": record.pass_id if record else None,
            "samples": sum(r.samples for _, r in procs if r is not None),
            "samples_per_s": round(record.samples_per_s, 1) if record and fresh else 0.0,
            "loss": record.loss if record else None,
            "stage": record.stage if record and alive else None,
            "restarts": max(0, len(incarnations.get(slot, ())) - 1),
            "last_seen_s": round(max(0.0, now - record.time), 1) if record and record.time
            else None,
        })
    return sorted(rows, key=lambda r: _natural(r["name"]))


def pserver_rows(pservers: Sequence[PServerSight], incarnations: Mapping[str, Sequence[str]],
                 figures: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """One row per shard: its process and its figures (the last ones, while it is down or
    was not scraped this time)."""
    rows = []
    for ps in sorted(pservers, key=lambda p: p.shard):
        m = figures.get(str(ps.shard)) or {}
        if ps.slot is None:  # down: its last rates are not what it does now
            m = {k: v for k, v in m.items() if k not in ("push_rate", "cpu_percent")}
        rows.append({
            "shard": ps.shard, "name": f"pserver-{ps.shard}", "up": ps.slot is not None,
            "address": ps.slot.address if ps.slot else None,
            "pid": ps.slot.pid if ps.slot else None, "host": ps.slot.host if ps.slot else None,
            "rows": _int(m.get("rows")), "bytes": _int(m.get("bytes")),
            "checkpoint_age_s": _round(m.get("checkpoint_age_s")),
            "push_rate": _round(m.get("push_rate")),
            "duplicates": _int(m.get("duplicates")),
            "push_ms": _round(m.get("push_ms")), "pull_ms": _round(m.get("pull_ms")),
            "cpu_percent": _round(m.get("cpu_percent")),
            "memory_bytes": _int(m.get("memory_bytes")),
            "restarts": max(0, len(incarnations.get(f"pserver-{ps.shard}", ())) - 1),
        })
    return rows


def with_row_states(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with a ``state`` in each trainer and pserver row, from the row and how the job
    stands: a trainer is running, finished (it left a job that succeeded), stopped (the job
    failed or was stopped), failed (its exit failed the job: ``failure.process``) or left (it
    left a running job); a pserver is serving, stopped (the job is over) or down."""
    state = doc.get("state")
    over = state in OVER
    failure = doc.get("failure")
    culprit = str(failure.get("process") or "").replace(" ", "-") \
        if isinstance(failure, dict) else ""

    def trainer_state(row: Mapping[str, Any]) -> str:
        if row.get("name") == culprit:
            return "failed"
        if row.get("live") and doc.get("live", True):
            return "running"
        if over:
            return "finished" if state == "succeeded" else "stopped"
        return "left"

    def pserver_state(row: Mapping[str, Any]) -> str:
        if row.get("name") == culprit:
            return "failed"
        if over:
            return "stopped"
        return "serving" if row.get("up") and doc.get("live", True) else "down"

    out = dict(doc)
    out["trainers"] = [{**r, "state": trainer_state(r)} for r in doc.get("trainers") or []
                       if isinstance(r, dict)]
    out["pservers"] = [{**r, "state": pserver_state(r)} for r in doc.get("pservers") or []
                       if isinstance(r, dict)]
    return out


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
    said = stages(progress, status.get("live_trainers") or [])
    doc.update({
        "live": live,
        "updated": round(now, 3),
        "started": round(memory.started, 3) if memory.started else None,
        "progress": {"fraction": round(fraction, 4),
                     "tasks_done": int((status.get("counts") or {}).get("done", 0)),
                     "tasks_total": status.get("num_tasks") or 0,
                     "eta_s": eta_seconds(status, fraction, series),
                     "elapsed_s": round(now - memory.started, 1) if memory.started else None},
        "activity": activity(status, said),
        "stages": said,
        "samples_total": sum(p.samples for p in progress.values()),
        "samples_per_s": last.get("samples_per_s"),
        "loss": losses[-1] if losses else None,  # the last known (no trainer is left at the end)
        "series": series,
        "pass_metrics": pass_metrics(progress),
        "result": dict(sight.result) if sight and sight.result else None,
        "progressive": [dict(p) for p in sight.progressive] if sight else [],
        "trainers": trainer_rows(status, progress, memory.incarnations, now),
        "pservers": pserver_rows(sight.pservers if sight else (), memory.incarnations,
                                 memory.pserver_metrics),
        "metrics_urls": metrics_urls(sight.endpoints if sight else ()),
        "failovers_total": memory.failovers,
        "events": [e.as_dict() for e in events],
        "observer": memory.as_dict(),
    })
    return with_row_states(doc)


def carry_over(saved: Mapping[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """Keep what a saved document knew that a fresh one cannot (before the first tick of a new
    leader): its pass metrics, trainers and pservers rows, the result and a stream's
    progressive validation."""
    for key in ("pass_metrics", "trainers", "pservers", "result", "progressive"):
        if not fresh.get(key) and saved.get(key):
            fresh[key] = saved[key]
    return fresh


def offline(doc: Mapping[str, Any], now: float) -> dict[str, Any]:
    """A saved document served when no master runs (``elasticps ui``): marked not live,
    nothing in it running any more, its rows in the states the job ended with."""
    out = dict(doc)
    out["live"] = False
    out["activity"] = None
    out["stages"] = {}
    out["trainers"] = [{**r, "live": False, "samples_per_s": 0.0, "stage": None}
                       for r in doc.get("trainers") or [] if isinstance(r, dict)]
    out["served"] = round(now, 3)
    progress = out.get("progress")
    if out.get("state") in OVER and out.get("state") != "succeeded":
        out["progress"] = {**(progress if isinstance(progress, dict) else {}), "eta_s": None}
    return with_row_states(out)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _natural(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


__all__ = ["activity", "carry_over", "document", "eta_seconds", "offline", "pass_metrics",
           "pserver_rows", "stages", "trainer_rows", "with_row_states"]
