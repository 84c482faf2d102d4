"""The online example's figures: freshness, progressive AUC, serving under new versions, lag.

    python benchmarks/online.py [--json FILE] [--partitions 12] [--every 5] [--fast-every 0.5]

Runs ``examples/online/run.py`` (a stream landing, ``elasticps run ... train.py --stream
--export-dir``, ``elasticps serve`` following it, the example's client) three times:

* ``defaults``: the example's defaults (``--partitions`` partitions of 20,000 rows every
  ``--every`` seconds, 2 trainers, 2 pservers, a version each partition trained through):
  freshness from commit to the version's publication (the job's ``summary.json``) and from
  commit to a served answer (the client), and per partition the progressive AUC beside the
  planted model's (``_planted.json``: the best any model scores there);
* ``serving``: the same, with ``--clients`` threads scoring without pause against the server
  all along (``benchmarks/serve_latency.py``'s clients): latency p50/p99 and requests per second
  while new versions land and are applied, every answer checked to name a published version;
* ``lag``: a generator faster than training (``--fast-every`` seconds apart): every 0.5 s the
  job's status (``/api/status``) gives the partitions waiting (appended, not trained through)
  and the newest trained partition, whose age is measured from its commit (its manifest's time).

Everything shares the machine's cores (generator, job, server, clients), so the figures are
this machine's, loaded as a user's laptop would be.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # serve_latency: this directory's

from run_facts import run_facts  # noqa: E402
from serve_latency import Clients, phase  # noqa: E402

from elasticps.data.stream import FsspecPartitionSource, Partition  # noqa: E402


def example() -> Any:
    """``examples/online/run.py`` as a module (examples are scripts, not a package)."""
    path = REPO / "examples/online/run.py"
    spec = importlib.util.spec_from_file_location("online_run", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_args(workdir: Path, partitions: int, every: float, rows: int) -> argparse.Namespace:
    return example().parse_args(["--workdir", str(workdir), "--partitions", str(partitions),
                                 "--every", str(every), "--rows", str(rows)])


def bodies(rows: int) -> list[bytes]:
    """Requests for the example's model: ``rows`` random (user, item) impressions each."""
    out = []
    for seed in range(64):
        rng = np.random.default_rng(seed)
        out.append(json.dumps({"rows": [
            {"user": int(rng.integers(0, 2000)), "item": int(rng.integers(0, 500))}
            for _ in range(rows)]}).encode())
    return out


def load(clients: int, rows: int, result: dict[str, Any]) -> Callable[[str, Path], Any]:
    """A ``during`` hook: clients scoring from the server's start to the job's end."""

    def during(url: str, workdir: Path) -> Callable[[], None]:
        port = int(url.rsplit(":", 1)[1])
        load = Clients(port, clients, rows, bodies(rows))
        load.start()
        started = time.perf_counter()

        def done() -> None:
            ended = time.perf_counter()
            records = load.finish()
            answered = sorted({r[3] for r in records if r[2] == 200})
            # From the first answer on (before it, no version was loaded: 503 by design).
            first = min((r[0] for r in records if r[2] == 200), default=started)
            result.update(phase(records, first, ended, answered))
            result["versions_answered"] = len(answered)

        return done

    return during


def lag(result: dict[str, Any]) -> Callable[[str, Path], Any]:
    """A ``during`` hook: the job's stream status every 0.5 s."""

    def during(url: str, workdir: Path) -> Callable[[], None]:
        stop = threading.Event()
        samples: list[tuple[int, float | None]] = []

        def sample() -> None:
            source = FsspecPartitionSource(str(workdir / "clicks"))
            status_url = None
            while not stop.wait(0.5):
                if status_url is None:
                    found = re.search(r"status: (http://\S+?)/?$",
                                      _read(workdir / "job.log"), re.MULTILINE)
                    status_url = found.group(1) if found else None
                    continue
                try:
                    with urllib.request.urlopen(f"{status_url}/api/status", timeout=5) as answer:
                        stream = json.loads(answer.read()).get("stream") or {}
                except (OSError, ValueError):
                    continue
                newest = stream.get("trained_through")
                committed = source.committed_at(Partition(newest)) if newest else None
                samples.append((int(stream.get("waiting") or 0),
                                None if committed is None else time.time() - committed))

        thread = threading.Thread(target=sample)
        thread.start()

        def done() -> None:
            stop.set()
            thread.join()
            waiting = [w for w, _ in samples]
            ages = [a for _, a in samples if a is not None]
            result.update({
                "samples": len(samples),
                "partitions_waiting": {"median": statistics.median(waiting) if waiting else None,
                                       "max": max(waiting, default=None)},
                "newest_trained_age_s": {
                    "median": round(statistics.median(ages), 2) if ages else None,
                    "max": round(max(ages), 2) if ages else None}})

        return done

    return during


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/tmp/online-bench")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--fast-partitions", type=int, default=16)
    parser.add_argument("--fast-every", type=float, default=0.5)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--request-rows", type=int, default=16)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    run = example().run
    root = Path(args.workdir)

    defaults = run(run_args(root / "defaults", args.partitions, args.every, args.rows))
    serving: dict[str, Any] = {}
    with_load = run(run_args(root / "serving", args.partitions, args.every, args.rows),
                    load(args.clients, args.request_rows, serving))
    lagging: dict[str, Any] = {}
    fast = run(run_args(root / "lag", args.fast_partitions, args.fast_every, args.rows),
               lag(lagging))
    result = {
        **run_facts(vars(args)),
        "defaults": defaults,
        "serving": {**serving, "freshness_published_s": with_load["freshness_published_s"],
                    "freshness_served_s": with_load["freshness_served_s"],
                    "exit_codes": with_load["exit_codes"]},
        "lag": {**lagging, "generator_every_s": args.fast_every,
                "partitions": args.fast_partitions, "wall_s": fast["wall_s"],
                "freshness_published_s": fast["freshness_published_s"],
                "exit_codes": fast["exit_codes"]},
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
