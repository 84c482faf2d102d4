"""How many of this machine's cores sat idle since the last look (from ``/proc/stat``).

The autoscaler asks it before adding a trainer: on one machine a trainer is a process that
wants about a core, and a machine without one idle gets slower, not faster, with another.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def parse_cpu_line(text: str) -> tuple[int, int]:
    """(idle, total) jiffies from ``/proc/stat``'s aggregate ``cpu`` line; idle counts iowait."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            # user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
            values = [int(v) for v in fields[1:9]]
            if len(values) < 4:
                break
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return idle, sum(values)
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


class IdleCores:
    """``sample()``: idle cores over the interval since the previous call (the first call
    measures since boot)."""

    def __init__(self, path: Path = PROC_STAT, cores: int | None = None) -> None:
        self.path = path
        self.cores = cores or os.cpu_count() or 1
        self._last = (0, 0)

    def sample(self) -> float:
        idle, total = parse_cpu_line(self.path.read_text())
        d_idle, d_total = idle - self._last[0], total - self._last[1]
        self._last = (idle, total)
        if d_total <= 0:
            return 0.0
        return self.cores * max(0.0, min(1.0, d_idle / d_total))
