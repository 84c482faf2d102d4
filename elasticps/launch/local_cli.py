"""``elasticps status | logs | ui`` for a job started by ``elasticps run`` (found through its
work directory), shaped like the cluster verbs: a summary of the state and each role's
processes, one role's log (``-f`` follows it until the job ends), and the status page of a
finished job served again."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from elasticps.errors import ConfigError
from elasticps.launch.local_job import LocalJob
from elasticps.launch.progress_view import format_eta
from elasticps.master.status_access import is_loopback
from elasticps.master.status_logs import LogFiles
from elasticps.master.status_page import StatusServer

ROLES = ("master", "pserver", "trainer")
_ROLE = re.compile(r"^(master|pserver|trainer)(?:-(\d+))?\Z")


# -- status -----------------------------------------------------------------------------------


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
    if doc.get("job_failed_reason"):
        lines.append(f"  failed: {doc['job_failed_reason']}")
    failure = doc.get("failure")
    if isinstance(failure, dict) and failure.get("traceback"):
        lines.append(f"  last lines of {failure.get('log') or failure.get('process')}:")
        lines += [f"    {line}" for line in str(failure["traceback"]).splitlines()]
    if doc.get("live"):
        lines.append(f"  status page: {doc.get('status_url', '-')}")
    else:
        lines.append(f"  status page of the finished job: elasticps ui {job.workdir}")
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


def is_role(text: str) -> bool:
    return _ROLE.match(text) is not None


def log_path(job: LocalJob, role: str, index: int) -> Path:
    """The launcher's log file of the ``index``-th process of ``role``."""
    m = _ROLE.match(role)
    if m is None:
        raise ConfigError(f"role {role!r} is not master, pserver or trainer (optionally with "
                          "its index: trainer-1)")
    name, idx = m.group(1), int(m.group(2)) if m.group(2) else index
    file = "master.log" if name == "master" and idx == 0 else f"{name}-{idx}.log"
    path = job.workdir / "logs" / file
    if not path.exists():
        known = sorted(p.stem for p in (job.workdir / "logs").glob("*.log"))
        raise ConfigError(f"job {job.job_name} has no {name} {idx} log ({path}); logs: "
                          f"{', '.join(known) or 'none yet'}")
    return path


def follow_lines(path: Path, job: LocalJob, *, tail: int | None, follow: bool,
                 poll_s: float = 0.25) -> Iterator[str]:
    """The file's lines (the last ``tail``), then, with ``follow``, new ones as they come until
    the job's launcher has exited."""
    with path.open("r", errors="replace") as handle:
        lines = handle.readlines()
        yield from (line.rstrip("\n") for line in (lines[-tail:] if tail else lines))
        partial = ""
        while follow:
            alive = job.launcher_alive()
            chunk = handle.read()
            if chunk:
                partial += chunk
                *complete, partial = partial.split("\n")
                yield from complete
            elif not alive:
                break
            else:
                time.sleep(poll_s)  # tail -f: nothing to wait on but the file growing
        if partial:
            yield partial


def run_logs(args: argparse.Namespace, out: TextIO | None = None) -> int:
    job = LocalJob.find(args.workdir)
    role = args.target or args.role
    path = log_path(job, role, args.index)
    for line in follow_lines(path, job, tail=args.tail, follow=args.follow):
        print(line, file=out or sys.stdout, flush=args.follow)
    return 0


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
