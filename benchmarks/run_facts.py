"""What a benchmark's JSON records about where and when it ran: this directory's helper."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from elasticps.launch.threads import usable_cores

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_facts(options: dict[str, Any]) -> dict[str, Any]:
    """Date, CPU, cores (the ones this process may run on: ``taskset`` narrows them), load
    average, this checkout's commit and the run's options."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    return {"date": datetime.date.today().isoformat(), "cpu": cpu_model(),
            "cores": usable_cores(), "load_average": os.getloadavg(),
            "commit": commit, "options": options}
