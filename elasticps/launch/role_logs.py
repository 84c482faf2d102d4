"""Which log files ``elasticps logs`` prints for a role name of a local job.

Names (``--role R --index K`` is the same as ``R-K``)::

    master          the leading master, as the launcher last saw it
    master-K        the K-th master process the launcher started (0 the first, then standbys)
    pserver-K       the process that serves pserver shard K (or served it last)
    trainer-K       trainer K (PADDLE_TRAINER_ID=K)
    pserver, trainer    shard 0, trainer 0
    R --all         every process of role R (master --all: the leader and its standbys)
    --all, or no name   every process of the job

The launcher's files are named by start order (:func:`~.process_records.log_name`); the
processes that serve ``master`` and ``pserver-K`` come from its records
(:mod:`~.process_records`). Each file is labelled, in a merged view, with the name it is asked
for by: ``master-K``, ``trainer-K``, and for a pserver the shard its process served last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elasticps.errors import ConfigError
from elasticps.launch.local_job import LocalJob
from elasticps.launch.process_records import ProcessRecords, log_name

ROLES = ("master", "pserver", "trainer")
_NAME = re.compile(r"^(master|pserver|trainer)(?:-(\d{1,6}))?\Z")
_FILE = re.compile(r"^(master|pserver|trainer)(?:-(\d{1,6}))?\.log\Z")


@dataclass(frozen=True)
class LogSource:
    label: str  # what its lines are prefixed with in a merged view
    path: Path


def is_role(text: str) -> bool:
    return _NAME.match(text) is not None


def parse_name(text: str) -> tuple[str, int | None]:
    """``("pserver", 1)`` for ``pserver-1``; ``("master", None)`` for ``master``."""
    match = _NAME.match(text)
    if match is None:
        raise ConfigError(f"role {text!r} is not master, pserver or trainer, optionally with "
                          "its index (trainer-1, pserver-0, master-1)")
    return match.group(1), int(match.group(2)) if match.group(2) else None


def every_log(job: LocalJob, role: str | None = None) -> list[LogSource]:
    """Every log file of the job (of ``role``), labelled, in role then start order."""
    records = ProcessRecords.read(job.workdir)
    serves = records.serves_by_log()
    found: list[tuple[int, int, LogSource]] = []
    for path in (job.workdir / "logs").glob("*.log"):
        match = _FILE.match(path.name)
        if match is None or (role is not None and match.group(1) != role):
            continue
        name, index = match.group(1), int(match.group(2) or 0)
        label = serves.get(path.name, path.stem) if name == "pserver" else f"{name}-{index}"
        found.append((ROLES.index(name), index, LogSource(label, path)))
    return [source for _, _, source in sorted(found, key=lambda f: (f[0], f[1]))]


def resolve(job: LocalJob, name: str | None, *, every: bool = False
            ) -> tuple[list[LogSource], str | None]:
    """The log files ``name`` asks for, and a note for the person when they are a guess."""
    if name is None:
        return _existing(job, every_log(job), "any process"), None
    role, index = parse_name(name)
    if every:
        if index is not None:
            raise ConfigError(f"--all prints every {role} process; name the role without an "
                              f"index ({role} --all), or one process without --all ({name})")
        return _existing(job, every_log(job, role), f"a {role}"), None
    records = ProcessRecords.read(job.workdir)
    if role == "master" and index is None:
        leader = records.log_of("master")
        if leader is None:
            note = (f"job {job.job_name}: the launcher has not seen a leading master (yet); "
                    "showing every master process")
            return _existing(job, every_log(job, "master"), "a master"), note
        return [_source(job, "master", leader)], None
    index = index or 0
    if role == "pserver":
        return _pserver(job, records, index)
    return [_source(job, f"{role}-{index}", log_name(role, index))], None


def _pserver(job: LocalJob, records: ProcessRecords, shard: int
             ) -> tuple[list[LogSource], str | None]:
    served = records.log_of(f"pserver-{shard}")
    if served is not None:
        return [_source(job, f"pserver-{shard}", served)], None
    if not records.processes:  # a launcher that kept no records: start order is all we know
        note = (f"job {job.job_name} has no record of which process serves which shard; "
                f"showing the pserver started {_ordinal(shard)}")
        return [_source(job, f"pserver-{shard}", log_name("pserver", shard))], note
    known = sorted(name for name in records.serving if name.startswith("pserver-"))
    raise ConfigError(f"job {job.job_name}: no process has been seen serving pserver shard "
                      f"{shard} (the launcher notes a claimed shard within a second); shards "
                      f"seen: {', '.join(known) or 'none yet'}")


def _source(job: LocalJob, label: str, file: str) -> LogSource:
    path = job.workdir / "logs" / file
    if not path.exists():
        known = sorted(p.stem for p in (job.workdir / "logs").glob("*.log"))
        raise ConfigError(f"job {job.job_name} has no {label} log ({path}); logs: "
                          f"{', '.join(known) or 'none yet'}")
    return LogSource(label, path)


def _existing(job: LocalJob, sources: list[LogSource], what: str) -> list[LogSource]:
    if not sources:
        raise ConfigError(f"job {job.job_name} has no log of {what} yet "
                          f"({job.workdir / 'logs'})")
    return sources


def _ordinal(index: int) -> str:
    return {0: "first", 1: "second", 2: "third"}.get(index, f"{index + 1}th")
