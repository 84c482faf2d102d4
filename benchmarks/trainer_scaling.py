"""How a job's throughput grows as trainers are added: the CTR demo with 1, 2, 4, 8 trainers
and 2 pservers on the same data, samples/s of the job and per trainer, each beside one
trainer's (strong scaling: the same rows, shared by more trainers).

    python benchmarks/trainer_scaling.py [--mode hybrid] [--trainers 1,2,4,8] [--pservers 2]
        [--rows 1000000] [--repeat 1] [--quick] [--json FILE]

Each count runs ``elasticps run --trainers N --pservers P --mode MODE examples/ctr/train.py``
with the launcher's default split of the cores (``taskset -c 0-7 python ...`` runs the whole
benchmark on 8 cores: the launcher plans for the cores it may use), one pass, and reads the
job's summary: ``samples_per_sec`` (samples trained by every trainer / the longest trainer's
time in its training loop) and the exported model's test ``auc``. ``per_trainer_sps`` is the
job's samples/s over N and ``efficiency`` that over one trainer's samples/s (1.0: each added
trainer trains as fast as a lone one). The counts run in the order given, each ``--repeat``
times (medians reported), in the same invocation on the same dataset, generated in chunks (the
master's tasks) of at most 65,536 rows and small enough for 4 per trainer at the largest count.

On a machine with fewer cores than trainers plus pservers the processes share cores and the
efficiency says so; the figures worth recording come from a machine with a core per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # run_facts: this directory's helper

from run_facts import run_facts  # noqa: E402

from elasticps.config import MODES  # noqa: E402
from elasticps.data.synth import synth_ctr  # noqa: E402
from elasticps.data.write_defaults import (  # noqa: E402
    DEFAULT_ROWS_PER_CHUNK,
    SMALL_CHUNK_ROWS,
)
from elasticps.launch.threads import usable_cores  # noqa: E402


def job(trainers: int, data: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``elasticps run`` with ``trainers`` trainers: its summary's figures."""
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", str(trainers),
            "--pservers", str(args.pservers), "--workdir", str(workdir), "--mode", args.mode,
            str(REPO / "examples/ctr/train.py"), "--data", data, "--passes", "1",
            "--batch-size", str(args.batch_size), "--hidden", args.hidden, "--seed", "1"]
    with tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.DEVNULL, stderr=err, text=True)
        if done.returncode != 0:
            err.seek(0)
            raise SystemExit(f"trainer_scaling: the {trainers}-trainer job failed "
                             f"(exit {done.returncode}):\n{err.read()[-3000:]}")
    summary = json.loads((workdir / "summary.json").read_text())
    return {"samples_per_sec": summary["samples_per_sec"], "auc": summary.get("auc"),
            "samples": summary["samples"], "wall_s": summary["wall_s"],
            "threads": summary.get("threads")}


def scaling(runs: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per trainer count: the medians of its runs, samples/s per trainer, and the efficiency
    against the smallest count's samples/s per trainer."""
    rows = []
    for trainers in sorted(runs):
        sps = statistics.median(r["samples_per_sec"] for r in runs[trainers])
        aucs = [r["auc"] for r in runs[trainers] if r["auc"] is not None]
        rows.append({"trainers": trainers, "samples_per_sec": sps,
                     "per_trainer_sps": sps / trainers,
                     "auc": statistics.median(aucs) if aucs else None,
                     "runs": runs[trainers]})
    base = rows[0]["per_trainer_sps"] if rows else 0.0
    for row in rows:
        row["efficiency"] = row["per_trainer_sps"] / base if base else None
    return rows


def counts(text: str) -> list[int]:
    """``--trainers 1,2,4,8`` as distinct positive counts, in the order given."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(
            f"--trainers {text!r} must be distinct whole numbers >= 1, comma-separated "
            "(e.g. 1,2,4,8)")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="hybrid",
                        help="elasticps run --mode of every job (default hybrid)")
    parser.add_argument("--trainers", type=counts, default=[1, 2, 4, 8],
                        help="trainer counts to run, comma-separated (default 1,2,4,8)")
    parser.add_argument("--pservers", type=int, default=2,
                        help="pservers of every job (default 2)")
    parser.add_argument("--rows", type=int, default=1_000_000,
                        help="synthetic training rows, shared by the trainers (default 1M)")
    parser.add_argument("--test-rows", type=int, default=50_000,
                        help="held-out rows the exported model is scored on (default 50k)")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="each trainer's batch (default 1000)")
    parser.add_argument("--hidden", default="400,400,400",
                        help="the CTR-DNN's hidden layers (default 400,400,400)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each count; medians reported (default 1)")
    parser.add_argument("--data", help="an existing dataset with a test split (default: "
                        "generate --rows synthetic rows)")
    parser.add_argument("--quick", action="store_true",
                        help="40k rows, 1 and 2 trainers, 1 pserver, a 64x64 tower: checks "
                             "the harness, not the machine")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.test_rows, args.trainers = 40_000, 5_000, [1, 2]
        args.pservers, args.hidden = 1, "64,64"
    if args.pservers < 1 or args.repeat < 1:
        parser.error("--pservers and --repeat must be >= 1")
    with tempfile.TemporaryDirectory(prefix="elasticps-scaling-") as tmp:
        data = args.data
        if data is None:
            data = str(Path(tmp) / "data")
            # Chunks (the master's tasks) small enough for 4 per trainer at the largest count,
            # so that every trainer works and the last task does not leave the others idle.
            chunk = max(SMALL_CHUNK_ROWS, min(DEFAULT_ROWS_PER_CHUNK,
                                              args.rows // (4 * max(args.trainers))))
            synth_ctr(data, args.rows, 1, test_rows=args.test_rows, rows_per_chunk=chunk,
                      progress=False)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.trainers}
        for i in range(args.repeat):
            for n in args.trainers:
                run = job(n, data, Path(tmp) / f"job-{n}-{i}", args)
                runs[n].append(run)
                print(f"{n} trainer(s) x {args.pservers} pserver(s): "
                      f"{run['samples_per_sec']:,.0f} samples/s, auc {run['auc']}", flush=True)
    rows = scaling(runs)
    print(f"\n{args.mode}, {args.pservers} pserver(s), {args.rows:,} rows, "
          f"{usable_cores()} cores (medians of {args.repeat}):")
    for row in rows:
        print(f"  {row['trainers']:>2} trainer(s): {row['samples_per_sec']:>9,.0f} samples/s, "
              f"{row['per_trainer_sps']:>9,.0f} per trainer, efficiency "
              f"{row['efficiency']:.2f}, auc {row['auc']}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {**run_facts(vars(args)), "scaling": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
