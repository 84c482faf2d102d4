"""``elasticps status | logs | ui | stop | list`` for jobs started by ``elasticps run`` (each
found through its work directory), shaped like the cluster verbs: a summary of the state and
each role's processes, a role's log or every log merged (``-f`` follows until the job ends),
the status page of a finished job served again, a graceful stop, and the user's local jobs."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from elasticps.errors import ConfigError
from elasticps.launch.local_job import LocalJob
from elasticps.launch.log_view import view
from elasticps.launch.progress_view import format_eta
from elasticps.launch.role_logs import LogSource, resolve
from elasticps.master.status_access import is_loopback
from elasticps.master.status_logs import LogFiles
from elasticps.master.status_page import StatusServer

# -- status -----------------------------------------------------------------------------------


def stream_lines(doc: dict[str, Any]) -> list[str]:
    """A stream's progress (partitions, the newest trained through and its lag, those
    waiting), what the job is doing when it is not training (waiting for data), and the
    newest partition's progressive AUC."""
    lines = []
    stream = doc.get("stream")
    if isinstance(stream, dict):
        lag = stream.get("lag_s")
        lines.append(f"  stream {stream.get('partitions', 0)} partition(s), trained through "
                     f"{stream.get('trained_through') or '-'}"
                     + (f" (lag {format_eta(lag)})" if isinstance(lag, int | float) else "")
                     + f", {stream.get('waiting', 0)} waiting"
                     + (", ended" if stream.get("ended") else ""))
    scores = [s for s in doc.get("progressive") or [] if isinstance(s, dict)
              and s.get("final") and isinstance(s.get("auc"), int | float)]
    if scores:
        lines.append(f"  progressive AUC {float(scores[-1]['auc']):.4f} "
                     f"({scores[-1].get('partition')})")
    if doc.get("activity") and doc.get("live"):
        lines.append(f"  now: {doc['activity']}")
    return lines


def summary(job: LocalJob, doc: dict[str, Any] | None) -> str:
    """The local job's state, its roles and its progress, as ``elasticps status`` prints it."""
    if doc is None:
        return (f"job {job.job_name} (local, {job.workdir}): "
                + ("starting" if job.launcher_alive() else "unknown (nothing was saved)"))
    state = str(doc.get("state") or "unknown")
    launcher = doc.get("launcher") if isinstance(doc.get("launcher"), dict) else None
    if launcher and launcher.get("state") not in (None, state):
        state = f"{state} (launcher: {launcher['state']})"
    lines = [f"job {job.job_name} (local, {job.workdir}): {state}"]
    masters = doc.get("metrics_urls", {}).get("master", {}) if doc.get("live") else {}
    if masters:
        lines.append(f"  {'master':<8} {len(masters)} process(es), leader {doc.get('master')}")
    else:
        lines.append(f"  {'master':<8} leader was {doc.get('master') or '-'}")
    pservers = doc.get("pservers") or []
    lines.append(f"  {'pserver':<8} {len(pservers)} shard(s), "
                 f"{sum(1 for p in pservers if p.get('up') and doc.get('live'))} serving, "
                 f"{sum(int(p.get('restarts') or 0) for p in pservers)} restart(s)")
    for ps in pservers:
        lines.append(f"    {ps.get('name', '?'):<12} {ps.get('address') or '-':<22} "
                     f"rows {ps.get('rows') if ps.get('rows') is not None else '-'}  "
                     f"restarts {ps.get('restarts', 0)}")
    trainers = doc.get("trainers") or []
    lines.append(f"  {'trainer':<8} {len(trainers)} trainer(s), "
                 f"{sum(1 for t in trainers if t.get('live'))} running, "
                 f"{sum(int(t.get('restarts') or 0) for t in trainers)} restart(s)")
    for t in trainers:
        lines.append(f"    {t.get('name', '?'):<12} {t.get('state') or '-':<8} "
                     f"samples {t.get('samples', 0):,}  restarts {t.get('restarts', 0)}")
    progress = doc.get("progress") or {}
    if doc.get("pass") is not None:
        passes = doc.get("num_passes")
        lines.append(
            f"  pass {min(int(doc['pass']) + 1, passes or 10**9)}/{passes} | tasks "
            f"{progress.get('tasks_done', 0)}/{progress.get('tasks_total', 0)} | "
            f"{100 * float(progress.get('fraction') or 0):.1f}% | ETA "
            f"{'done' if doc.get('state') == 'succeeded' else format_eta(progress.get('eta_s'))}"
            + (f" | {float(doc['samples_per_s']):,.0f} samples/s"
               if doc.get("samples_per_s") is not None and doc.get("live") else "")
            + (f" | loss {float(doc['loss']):.4f}" if doc.get("loss") is not None else ""))
    lines += stream_lines(doc)
    if doc.get("job_failed_reason"):
        lines.append(f"  failed: {doc['job_failed_reason']}")
    failure = doc.get("failure")
    if isinstance(failure, dict) and failure.get("traceback"):
        lines.append(f"  last lines of {failure.get('log') or failure.get('process')}:")
        lines += [f"    {line}" for line in str(failure["traceback"]).splitlines()]
    if doc.get("live"):
        lines.append(f"  status page: {doc.get('status_url', '-')}")
    else:
        lines.append(f"  status page of the finished job: elasticps ui --workdir {job.workdir}")
    return "\n".join(lines)


def run_status(args: argparse.Namespace) -> int:
    job = LocalJob.find(args.workdir)
    doc = job.document()
    if getattr(args, "json", False):
        print(json.dumps({"job": job.job_name, "workdir": str(job.workdir), "document": doc},
                         indent=2, sort_keys=True))
    else:
        print(summary(job, doc))
    return 0


# -- logs -------------------------------------------------------------------------------------


def run_logs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """One role's log as it is, or several (``--all``, or a name that stands for several)
    merged by time, each line prefixed by its process; ``-f`` follows until the job ends."""
    job = LocalJob.find(args.workdir)
    name = args.role_name
    sources, note = resolve(job, name, every=args.all)
    if note:
        print(f"elasticps logs: {note}", file=sys.stderr)
    merged = len(sources) > 1 or args.all or name is None

    def refresh() -> list[LogSource]:
        return resolve(job, name, every=args.all)[0]

    for line in view(sources, job, tail=args.tail, follow=args.follow, prefix=merged,
                     refresh=refresh if merged else None):
        print(line, file=out or sys.stdout, flush=args.follow)
    return 0


# -- stop and list ----------------------------------------------------------------------------


def run_stop(args: argparse.Namespace) -> int:
    from elasticps.launch.stop import stop_job

    if args.timeout <= 0:
        raise ConfigError(f"--timeout={args.timeout:g} must be > 0 seconds")
    return stop_job(LocalJob.find(args.workdir), args.timeout, print)


def job_rows(workdirs: list[Path]) -> list[dict[str, Any]]:
    """Name, work directory, state and status page of each local job, for ``elasticps list``."""
    rows = []
    for workdir in workdirs:
        try:
            job = LocalJob.find(workdir)
        except ConfigError:
            continue  # deleted since it was listed
        state = job.state()
        url = job.status_url() if state == "running" else None
        rows.append({"name": job.job_name, "workdir": str(job.workdir), "state": state,
                     "status_url": url,
                     "page": url or f"elasticps ui --workdir {job.workdir}"})
    return rows


def run_list(args: argparse.Namespace) -> int:
    from elasticps.launch import job_registry

    if args.dir is not None:
        root = Path(args.dir).resolve()
        if not root.is_dir():
            raise ConfigError(f"{args.dir!r} is not a directory")
        rows, where = job_rows(job_registry.workdirs_under(root)), f"under {root}"
    else:
        rows = job_rows([entry.workdir for entry in job_registry.registered()])
        where = f"started by you (registry: {job_registry.registry_dir()})"
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no local elasticps jobs {where}")
    else:
        print(_table(rows))
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    columns = (("NAME", "name"), ("STATE", "state"), ("WORKDIR", "workdir"),
               ("STATUS PAGE", "page"))
    widths = [max(len(title), *(len(str(r[key])) for r in rows)) for title, key in columns]
    lines = ["  ".join(f"{title:<{w}}" for (title, _), w in zip(columns, widths, strict=True))]
    lines += ["  ".join(f"{row[key]!s:<{w}}" for (_, key), w in zip(columns, widths, strict=True))
              for row in rows]
    return "\n".join(line.rstrip() for line in lines)


# -- ui ---------------------------------------------------------------------------------------


def run_ui(args: argparse.Namespace) -> int:
    """Serve the job's page (live while it runs, saved once it is over) until Ctrl-C."""
    if not is_loopback(args.host):
        # A finished job's page has no token to demand: it stays on this machine.
        raise ConfigError(f"--host={args.host!r}: `elasticps ui` serves on a loopback address "
                          "only (the page shows the job's whole state and asks no token); to "
                          "view it from elsewhere, forward the port (ssh -L 8080:127.0.0.1:8080)")
    job = LocalJob.find(args.workdir)
    if job.document() is None:
        raise ConfigError(f"job {job.job_name} in {job.workdir} has no status page saved yet")

    def document() -> dict[str, Any]:
        doc = job.document()
        if doc is None:
            raise ConfigError("the job's document vanished")
        return doc

    server = StatusServer(document, args.host, args.port, port_setting="--port",
                          logs=LogFiles(job.workdir / "logs"))
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    server.start()
    print(f"elasticps ui: the status page of job {job.job_name} is at "
          f"http://{args.host}:{server.port}/ (Ctrl-C stops it)", flush=True)
    try:
        done.wait()
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
