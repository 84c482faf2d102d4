"""CPU seconds of this process's threads, grouped by name, read from ``/proc`` (Linux).

A benchmark that runs a server in its own process takes :func:`sample` before and after a
measured window; :func:`spent_by_name` says which threads used the CPU in between: Python
threads by their names (``rpc_12`` -> ``rpc_N``: the gRPC server's workers), gRPC's native
threads by their kernel names (``event_engine``). A thread that ended inside the window is
missing from both samples; what it used shows as ``unattributed``.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_of(stat: str) -> float:
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces: split after it
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def sample() -> dict[int, tuple[str, float]]:
    """thread id -> (name, CPU seconds so far); empty where ``/proc`` is not there."""
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    found: dict[int, tuple[str, float]] = {}
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return found
    for entry in tasks.iterdir():
        try:
            cpu = _cpu_of((entry / "stat").read_text())
            kernel_name = (entry / "comm").read_text().strip()
        except OSError:
            continue  # it ended while we looked
        tid = int(entry.name)
        found[tid] = (names.get(tid, f"native:{kernel_name}"), cpu)
    return found


def process_cpu(pid: int | None = None) -> float:
    """CPU seconds of a whole process (every thread, ended ones too): this one, or ``pid``
    (0.0 once it is gone or where there is no ``/proc``)."""
    try:
        return _cpu_of(Path(f"/proc/{pid or 'self'}/stat").read_text())
    except OSError:
        return 0.0


def spent_by_name(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                  process_seconds: float) -> dict[str, float]:
    """CPU seconds each group of threads used between the samples, largest first; threads
    that ended in between are ``unattributed`` (the process's CPU less the rest)."""
    spent: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        group = re.sub(r"\d+", "N", name)
        spent[group] = spent.get(group, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    spent["unattributed"] = max(0.0, process_seconds - sum(spent.values()))
    return dict(sorted(((k, round(v, 3)) for k, v in spent.items() if v > 0),
                       key=lambda kv: -kv[1]))
