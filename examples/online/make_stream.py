"""Write a drifting click stream: one partition every few seconds, then its end marker.

    python examples/online/make_stream.py --out /tmp/clicks --partitions 12 --every 5

Each partition (``dt=YYYY-MM-DD/hour=HH``, hourly from ``--start``) holds ``--rows`` impressions
of a user and an item, each clicked with the probability of a planted logistic model::

    logit = bias + u[user] + (1 - d) * a[item] + d * b[item]

whose item preferences drift from ``a`` to ``b`` as the stream goes on (``d`` grows from 0 to 1
over ``--drift-hours``, then stays). A partition is written as a dataset (its manifest last: its
commit), then the next one ``--every`` seconds later; the end marker ``_END`` follows the last.
``PREFIX/_planted.json`` lists each partition with the AUC of the planted probabilities on its
rows: the best any model can score there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

from elasticps.data import write_dataset
from elasticps.data.metrics import auc
from elasticps.data.stream import write_end_marker

USERS, ITEMS = 2000, 500
SCHEMA = {"label": {"name": "click", "kind": "binary"},
          "columns": {"user": {"kind": "categorical", "table": "user", "id_space": USERS},
                      "item": {"kind": "categorical", "table": "item", "id_space": ITEMS}}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the stream's prefix (a directory)")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--every", type=float, default=5.0, help="seconds between two partitions")
    p.add_argument("--rows", type=int, default=20_000, help="impressions per partition")
    p.add_argument("--rows-per-chunk", type=int, default=5_000)
    p.add_argument("--start", default="2026-12-01T00", help="the first partition's hour (UTC)")
    p.add_argument("--first", type=int, default=0,
                   help="index of the first partition to write (the ones before it are "
                   "written by an earlier run)")
    p.add_argument("--drift-hours", type=float, default=24.0)
    p.add_argument("--no-end", action="store_true", help="leave the stream open (no _END)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    if args.partitions < 1 or args.rows < 1 or args.every < 0 or args.first < 0:
        p.error("--partitions and --rows must be >= 1, --every and --first >= 0")
    return args


def partition_name(start: dt.datetime, index: int) -> str:
    at = start + dt.timedelta(hours=index)
    return f"dt={at:%Y-%m-%d}/hour={at:%H}"


class Planted:
    """The drifting click model (see the module docstring)."""

    def __init__(self, seed: int, drift_hours: float) -> None:
        rng = np.random.default_rng(seed)
        self.user = rng.normal(0.0, 0.8, USERS)
        self.before, self.after = rng.normal(0.0, 1.5, ITEMS), rng.normal(0.0, 1.5, ITEMS)
        self.drift_hours = drift_hours
        self.bias = -1.5

    def probability(self, hour: int, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        d = min(1.0, hour / self.drift_hours) if self.drift_hours > 0 else 1.0
        logit = (self.bias + self.user[users] + (1 - d) * self.before[items]
                 + d * self.after[items])
        return 1.0 / (1.0 + np.exp(-logit))


def write_partition(out: Path, name: str, planted: Planted, hour: int, rows: int,
                    rows_per_chunk: int, seed: int) -> float:
    """Write one partition; the planted model's AUC on its rows."""
    rng = np.random.default_rng([seed, hour])
    users = rng.zipf(1.3, rows) % USERS
    items = rng.integers(0, ITEMS, rows)
    p = planted.probability(hour, users, items)
    clicks = (rng.random(rows) < p).astype(np.int8)
    write_dataset({"user": users, "item": items, "click": clicks}, str(out / name), SCHEMA,
                  rows_per_chunk=rows_per_chunk, overwrite=True)
    return float(auc(clicks, p))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = dt.datetime.strptime(args.start, "%Y-%m-%dT%H")
    planted = Planted(args.seed, args.drift_hours)
    record = out / "_planted.json"
    best = json.loads(record.read_text()) if record.exists() else {}
    for index in range(args.first, args.first + args.partitions):
        if index > args.first:
            time.sleep(args.every)
        name = partition_name(start, index)
        best[name] = write_partition(out, name, planted, index, args.rows, args.rows_per_chunk,
                                     args.seed)
        record.write_text(json.dumps(best, indent=1, sort_keys=True) + "\n")
        print(f"make_stream: {name} landed ({args.rows} rows, planted AUC {best[name]:.4f})",
              flush=True)
    if not args.no_end:
        write_end_marker(str(out))
        print(f"make_stream: {out}/_END written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
