"""Run the hybrid test script (tests/integration/trainer/scripts/hybrid_replicas.py) under
``elasticps run --mode hybrid`` and read back what each trainer process recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from elasticps.chaos.oracle import write_oracle_data
from tests.helpers import REPO

SCRIPT = REPO / "tests/integration/trainer/scripts/hybrid_replicas.py"
ROWS, ROWS_PER_CHUNK = 20_000, 1_000
LEASE_TTL = 2


@dataclass
class Record:
    """One trainer process's lines: the dense replica's step, digest and time after a batch."""

    trainer: int
    pid: int
    steps: dict[int, str]  # the replica's step after a batch -> its digest
    times: dict[int, float]
    batches: int  # lines written: a step repeats when a batch's round had not landed yet


def write_data(tmp_path: Path, rows: int = ROWS) -> Path:
    data = tmp_path / "data"
    write_oracle_data(str(data), rows, ROWS_PER_CHUNK)
    return data


def start(tmp_path: Path, data: Path, trainers: int, rows: int = ROWS, join_after: int = 0,
          hold_at: int = 0, **env: str) -> subprocess.Popen[str]:
    """The job; with ``hold_at`` trainer 0 stops after that many batches until :func:`go`."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "elasticps", "run", "--mode", "hybrid", "--trainers",
            str(trainers), "--pservers", "1", "--workdir", str(tmp_path / "job"), "--grace", "5",
            "--standby-masters", "0", str(SCRIPT), "--data", str(data), "--out", str(out),
            "--rows", str(rows), "--join-after", str(join_after), "--hold-at", str(hold_at)]
    return subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO),
                                       "PADDLE_LEASE_TTL": str(LEASE_TTL), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    give_up_at = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < give_up_at, f"gave up waiting for {what}"
        time.sleep(0.05)  # polling files another process writes: nothing to wait on instead


def ready(tmp_path: Path, trainer: int) -> bool:
    """Whether trainer ``trainer`` connected: a member of the dense group, holding its state."""
    return any((tmp_path / "out").glob(f"ready-{trainer}-*"))


def go(tmp_path: Path) -> None:
    """Let trainer 0 go on past ``hold_at``."""
    (tmp_path / "out" / "go").touch()


def lines(tmp_path: Path, trainer: int) -> int:
    """Batches trainer ``trainer`` recorded, over all its processes."""
    return sum(r.batches for r in records(tmp_path) if r.trainer == trainer)


@contextmanager
def running(job: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """The job, stopped if the test ends before it did (a failed wait leaves trainer 0 held):
    the launcher is killed, and its roles exit with it (they watch their parent)."""
    try:
        yield job
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate(timeout=60)


def finish(job: subprocess.Popen[str]) -> None:
    out, err = job.communicate(timeout=240)
    assert job.returncode == 0, (out + err)[-4000:]


def records(tmp_path: Path) -> list[Record]:
    found = []
    for path in sorted((tmp_path / "out").glob("trainer-*.txt")):
        _, trainer, pid = path.stem.split("-")
        steps, times = {}, {}
        written = path.read_text().splitlines()
        for line in written:
            step, digest, at = line.split()
            steps[int(step)], times[int(step)] = digest, float(at)
        found.append(Record(int(trainer), int(pid), steps, times, len(written)))
    return found


def differing(a: Record, b: Record) -> tuple[int, list[int]]:
    """(the steps both recorded, those whose replicas differ)."""
    common = sorted(set(a.steps) & set(b.steps))
    return len(common), [s for s in common if a.steps[s] != b.steps[s]]


def trainer_logs(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in (tmp_path / "job" / "logs").glob("trainer-*.log"))
