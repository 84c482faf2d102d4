"""A job started by ``elasticps run``, found from its work directory: what ``elasticps status``,
``logs`` and ``ui`` read.

``WORKDIR/job.json`` (written by the launcher at start) names the store, the job and the
launcher's pid with its start time (so a pid the system handed to another process since is not
taken for the launcher). While the job runs its page's document comes from the leading master
(``/api/status``); once it is over, from ``WORKDIR/status.json`` (written by the launcher at the
end: the master's saved document plus how the launcher ended) or, failing that, from the
document the master saved in the store (``job/history``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError, ElasticPSError
from elasticps.launch.scale import JOB_FILE
from elasticps.master.status_document import offline
from elasticps.master.status_read import fetch_status
from elasticps.private_files import replace_private
from elasticps.store import open_store
from elasticps.store.keys import MasterAddress, read_history, read_master_address

STATUS_FILE = "status.json"
TRACEBACK_LINES = 40  # of a failed process's last traceback, kept in status.json
SHORT_TAIL = 15  # log lines kept when the failed process left no traceback


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``), or None
    where there is no /proc or no such process. A zombie counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the name, in parentheses, may hold spaces
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class LocalJob:
    workdir: Path
    store_url: str
    job_name: str
    launcher_pid: int | None = None
    launcher_start: int | None = None  # process_start_time of the launcher, where known

    @classmethod
    def find(cls, workdir: str | os.PathLike[str] | None) -> LocalJob:
        """The job launched in ``workdir`` (default: the current directory)."""
        root = Path(workdir or ".").resolve()
        path = root / JOB_FILE
        try:
            doc = json.loads(path.read_text())
            return cls(root, str(doc["store"]), str(doc["job_name"]),
                       int(doc["launcher_pid"]) if doc.get("launcher_pid") else None,
                       int(doc["launcher_start"]) if doc.get("launcher_start") else None)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{root} holds no readable {JOB_FILE} (is it the --workdir of a "
                              f"job started with `elasticps run`?): {exc}") from exc

    def launcher_alive(self) -> bool:
        """The job's launcher still runs (and has not saved its end yet)."""
        if self.launcher_pid is None:
            return False
        if self.launcher_start is not None and Path("/proc/self/stat").exists():
            if process_start_time(self.launcher_pid) != self.launcher_start:
                return False  # gone, a zombie, or the pid belongs to another process now
        else:
            try:
                os.kill(self.launcher_pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
        return not (self.workdir / STATUS_FILE).exists()

    def state(self) -> str:
        """``running``, how the launcher ended (``succeeded``, ``failed``, ``interrupted``), or
        ``ended`` when it exited without saying (killed)."""
        if self.launcher_alive():
            return "running"
        try:
            doc = json.loads((self.workdir / STATUS_FILE).read_text())
            return str(doc["launcher"]["state"])
        except (OSError, ValueError, KeyError, TypeError):
            return "ended"

    def _leader(self) -> MasterAddress | None:
        """Where the running job's leading master serves, or None."""
        if not self.launcher_alive():
            return None
        try:
            with open_store(self.store_url, self.job_name) as store:
                return read_master_address(store)
        except ElasticPSError:
            return None

    def status_url(self) -> str | None:
        """The live status page's URL, while a master of the running job leads."""
        address = self._leader()
        return None if address is None else address.status_url

    # -- the page's document ----------------------------------------------------------------

    def live_document(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """The leading master's ``/api/status``, or None when no master serves."""
        address = self._leader()
        if address is None:
            return None
        doc = fetch_status(address.http, timeout=timeout)
        if doc is not None:
            doc.setdefault("status_url", address.status_url)
        return doc

    def saved_document(self) -> dict[str, Any] | None:
        """The finished job's document (marked not live), or None if nothing was saved."""
        path = self.workdir / STATUS_FILE
        doc: dict[str, Any] | None = None
        if path.exists():
            try:
                loaded = json.loads(path.read_text())
                doc = loaded if isinstance(loaded, dict) else None
            except (OSError, ValueError):
                doc = None
        if doc is None:
            doc = self._stored_document()
        return None if doc is None else offline(doc, time.time())

    def _stored_document(self) -> dict[str, Any] | None:
        if self.store_url.startswith("file://") and not Path(self.store_url[7:]).exists():
            return None
        try:
            with open_store(self.store_url, self.job_name) as store:
                return read_history(store)
        except ElasticPSError:
            return None

    def document(self) -> dict[str, Any] | None:
        """Live while a master serves, else the saved one."""
        return self.live_document() or self.saved_document()

    def save_final(self, state: str, reason: str | None, extra: dict[str, Any], *,
                   failure: dict[str, Any] | None = None) -> Path | None:
        """``WORKDIR/status.json``: the master's saved document and how the launcher ended
        (``failure``: the process whose exit failed the job, with its last traceback)."""
        doc = self._stored_document()
        if doc is None:
            return None
        doc["launcher"] = {"state": state, "reason": reason, **extra}
        if failure is not None:
            doc["failure"] = failure
        if state != "succeeded":  # the launcher ended it: the timeline's last entry says so
            doc["events"] = [*(doc.get("events") or []), {
                "time": time.time(), "kind": "job", "subject": self.job_name,
                "message": f"the job {state}: {reason}", "source": "launcher"}]
        if state in ("failed", "interrupted") and doc.get("state") not in ("failed",):
            doc["state"] = state
            doc["done"] = True
            doc["job_failed_reason"] = doc.get("job_failed_reason") or reason
        path = self.workdir / STATUS_FILE
        replace_private(path, (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False)
                               + "\n").encode())
        return path


def failure_record(process: str, reason: str | None, log_path: Path | None,
                   log_tail: str) -> dict[str, Any]:
    """What the page says of the process whose exit failed the job: its name, why, its log
    and the last lines that explain it (:func:`last_traceback`)."""
    return {"process": process, "reason": reason,
            "log": str(log_path) if log_path is not None else None,
            "traceback": last_traceback(log_tail)}


def last_traceback(log_tail: str, most: int = TRACEBACK_LINES) -> str:
    """The last Python traceback in a log's tail, from its ``Traceback`` line to the error
    (at most ``most`` lines, its end kept), or the tail's last lines when it holds none. In a
    JSON log a traceback is a record's ``exc`` (telemetry/stream_capture.py)."""
    lines = log_tail.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    recorded = _last_recorded_traceback(lines[starts[-1] + 1:] if starts else lines)
    if recorded is not None:
        return "\n".join(recorded.splitlines()[-most:])
    chosen = lines[starts[-1]:] if starts else lines
    return "\n".join(chosen[-most:] if starts else chosen[-SHORT_TAIL:])


def _last_recorded_traceback(lines: list[str]) -> str | None:
    """The ``exc`` of the last JSON log record among ``lines`` that has one."""
    for line in reversed(lines):
        if line.startswith("{") and '"exc"' in line:
            try:
                exc = json.loads(line).get("exc")
            except (ValueError, AttributeError):
                continue
            if isinstance(exc, str) and exc:
                return exc
    return None


def write_job_file(workdir: Path, store_url: str, job_name: str) -> None:
    """``WORKDIR/job.json``: how ``elasticps status|logs|scale|ui|stop --workdir`` find the
    job."""
    replace_private(workdir / JOB_FILE, (json.dumps(
        {"store": store_url, "job_name": job_name, "launcher_pid": os.getpid(),
         "launcher_start": process_start_time(os.getpid())}) + "\n").encode())
