"""What the start benchmarks share: running a local job under ``elasticps run`` and reading
when it did what from its own records, and the one-process PyTorch reference beside it.

* :func:`run_job` starts the job, watches its trainer logs every 10 ms for the first trained
  batch (to read each process's CPU seconds at that moment, from ``/proc``), and after the
  job's end reads each stage's time from the role logs' timestamps (``STAGES``); every time is
  in seconds after ``elasticps run`` was started.
* :func:`plain_torch_run` runs ``plain_torch_start.py`` in a fresh interpreter: pandas reads a
  CSV of ``examples/tabular/make_data.py``, an embedding + MLP model trains one batch.

Used by ``job_start.py`` (one job's start, by stage) and ``examples_start.py`` (every example's
start and wall time).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")
FIRST_BATCH = "trained its first batch"
# (stage, role log prefix, the line's text, first or last occurrence over those logs)
STAGES: tuple[tuple[str, str, str, str], ...] = (
    ("master serves", "master", "serves gRPC on", "first"),
    ("pservers serve", "pserver", "is serving at", "last"),
    ("table written", "trainer", "wrote table 'table'", "first"),
    ("first trainer joined", "trainer", "joined job", "first"),
    ("tables initialised", "trainer", "initialised the pserver tables", "first"),
    ("dataset set", "master", "set dataset", "first"),
    ("first batch", "trainer", FIRST_BATCH, "first"),
    ("every trainer trained", "trainer", FIRST_BATCH, "last"),
    ("all passes done", "trainer", "all passes are done", "last"),
)
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(entry.name))
    return found


def role_of(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    for role in ("master", "pserver", "trainer"):
        if role in argv:
            return role
    return "other"


def first_batch_seen(logs: Path) -> bool:
    return any(FIRST_BATCH in path.read_text(errors="replace")
               for path in logs.glob("trainer-*.log"))


def log_times(logs: Path, prefix: str, text: str) -> list[float]:
    """Wall-clock times of the lines holding ``text`` in the logs of one role."""
    times = []
    for path in sorted(logs.glob(f"{prefix}*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = LOG_TIME.match(line)
            if match and text in line:
                stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
                times.append(stamp.timestamp())
    return times


def stage_times(logs: Path, started: float) -> dict[str, float | None]:
    """Each of ``STAGES``, in seconds after ``started`` (None: no such line in the logs)."""
    stages: dict[str, float | None] = {}
    for stage, prefix, text, which in STAGES:
        times = log_times(logs, prefix, text)
        stages[stage] = round((min(times) if which == "first" else max(times)) - started, 3) \
            if times else None
    return stages


def cpu_by_role(launcher: int) -> dict[str, float]:
    """CPU seconds so far of the launcher and of its children, summed by role."""
    cpu: dict[str, float] = {}
    for pid in children(launcher):
        seconds = cpu_seconds(pid)
        if seconds is not None:
            name = role_of(pid)
            cpu[name] = round(cpu.get(name, 0.0) + seconds, 2)
    cpu["launcher"] = cpu_seconds(launcher) or 0.0
    return cpu


def run_job(argv: list[str], workdir: Path) -> dict[str, Any]:
    """Run ``argv`` (an ``elasticps run ... --workdir workdir ...`` command) to its end; its
    times, read from the job's logs, and the CPU its processes had used at the first batch.
    ``first_batch_s`` is the first ``trained its first batch`` line's timestamp."""
    shutil.rmtree(workdir, ignore_errors=True)
    load = os.getloadavg()[0]
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu: dict[str, float] = {}
    while proc.poll() is None:
        if not cpu and (workdir / "logs").is_dir() and first_batch_seen(workdir / "logs"):
            cpu = cpu_by_role(proc.pid)
        time.sleep(0.01)
    end = time.time() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"elasticps run failed ({proc.returncode}):\n{stderr[-3000:]}")
    stages = stage_times(workdir / "logs", started)
    if stages["first batch"] is None:
        raise RuntimeError(f"no trainer log in {workdir / 'logs'} says it {FIRST_BATCH}")
    stages["job end"] = round(end, 3)
    return {"load_avg_1m": round(load, 2), "first_batch_s": stages["first batch"],
            "end_s": round(end, 3), "stages": stages, "cpu_at_first_batch_s": cpu,
            "cpu_sum_s": round(sum(cpu.values()), 2)}


def plain_torch_run(csv: Path) -> dict[str, Any]:
    """``plain_torch_start.py`` on ``csv`` in a fresh interpreter: seconds from its start to
    torch imported, the data ready, and its first trained batch; and to its exit."""
    started = time.time()
    done = subprocess.run([sys.executable, str(BENCHMARKS / "plain_torch_start.py"), str(csv)],
                          check=True, capture_output=True, text=True)
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    return {"first_batch_s": round(marks["first_batch"] - started, 3),
            "data_ready_s": round(marks["data_ready"] - started, 3),
            "torch_imported_s": round(marks["torch_imported"] - started, 3),
            "end_s": round(time.time() - started, 3)}
