"""The local jobs this user started, for ``elasticps list``.

Every ``elasticps run`` leaves one small file in the user's state directory,
``$XDG_STATE_HOME/elasticps/jobs/`` (``~/.local/state/elasticps/jobs/`` when XDG_STATE_HOME is
unset, as the XDG base directory spec says): ``<hash of the workdir>.json`` =
``{"workdir", "job_name", "started"}``. The entry only points at the work directory; the job's
state is read there (``job.json``, ``status.json``), so the two never disagree. A job run again
in the same work directory replaces its entry; an entry whose work directory no longer holds a
job (deleted, or another job's now) is dropped when the next job registers. The directory is
the user's alone (0700, its files 0600: :mod:`elasticps.private_files`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from elasticps.launch.scale import JOB_FILE
from elasticps.private_files import make_private_dir, replace_private

log = logging.getLogger(__name__)


def registry_dir() -> Path:
    """``$XDG_STATE_HOME/elasticps/jobs``, or ``~/.local/state/elasticps/jobs``."""
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    # The spec says a relative value is invalid and must be ignored.
    base = Path(state) if state and Path(state).is_absolute() else \
        Path.home() / ".local" / "state"
    return base / "elasticps" / "jobs"


@dataclass(frozen=True)
class Entry:
    workdir: Path
    job_name: str
    started: float  # time.time() when the launcher started

    @property
    def current(self) -> bool:
        """The work directory still holds this job (not deleted, not another job's now)."""
        try:
            doc = json.loads((self.workdir / JOB_FILE).read_text())
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("job_name") == self.job_name


def _entry_path(workdir: Path) -> Path:
    digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:24]
    return registry_dir() / f"{digest}.json"


def register(workdir: Path, job_name: str) -> None:
    """Note the job started in ``workdir``; drop entries of jobs that are gone. A registry that
    cannot be written costs only the listing: a warning, and the job runs."""
    folder = registry_dir()
    try:
        make_private_dir(folder)
        for entry_file, entry in _read_all(folder):
            if not entry.current:
                entry_file.unlink(missing_ok=True)
        replace_private(_entry_path(workdir), (json.dumps(
            {"workdir": str(workdir), "job_name": job_name, "started": time.time()})
            + "\n").encode())
    except OSError as exc:
        log.warning("Job %s is not listed by `elasticps list`: cannot write %s: %s", job_name,
                    folder, exc)


def _read_all(folder: Path) -> list[tuple[Path, Entry]]:
    out: list[tuple[Path, Entry]] = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            out.append((path, Entry(Path(str(doc["workdir"])), str(doc["job_name"]),
                                    float(doc["started"]))))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a foreign or half-written file: not an entry
    return out


def registered() -> list[Entry]:
    """The jobs this user started that are still in their work directories, newest first."""
    folder = registry_dir()
    entries = [entry for _, entry in _read_all(folder)] if folder.is_dir() else []
    return sorted((e for e in entries if e.current), key=lambda e: e.started, reverse=True)


def workdirs_under(root: Path) -> list[Path]:
    """``root`` and its direct subdirectories that hold a job started by ``elasticps run``."""
    candidates = [root, *sorted(p for p in root.iterdir() if p.is_dir())] \
        if root.is_dir() else []
    return [path for path in candidates if (path / JOB_FILE).is_file()]
