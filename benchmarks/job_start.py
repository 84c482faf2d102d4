"""How long a local job takes to start: time to the first trained batch and to the job's end,
per stage, beside a one-process PyTorch script on the same data.

    python benchmarks/job_start.py [--runs 3] [--rows 200000] [--data DIR] [--json FILE]

The job is the README's "Your own data" one: ``examples/tabular/make_data.py --rows 200000``,
its schema inferred and both splits converted (once, timed as ``convert``), then ``--runs``
times ``elasticps run --trainers 2 --pservers 2 --workdir W examples/tabular/train.py --data D
--test-data T`` and the same job on the CSV files themselves (``--csv train.csv --test-csv
test.csv --schema schema.yaml``: DataFrames the job writes once as its datasets, no conversion
step). For each run, from the moment ``elasticps run`` is started:

* the stages, read from the role logs' timestamps: the leading master serves, the pservers
  serve, the trainers joined (their script's imports, the model, the connection), the tables
  initialised, the dataset set, the first trained batch (a trainer's ``trained its first
  batch`` line), every pass done, and the job's end (the launcher's exit);
* the CPU seconds each process had used when the first batch was trained (``/proc``): on two
  cores the start costs at least half their sum, whatever the order.

The reference: a plain PyTorch script (``plain_torch_start.py``, run in a fresh interpreter)
that reads the same ``train.csv`` with pandas, encodes its columns (category codes, the genres
as bags, the numbers standardised) and trains an embedding + MLP model of the same shape,
printing when its first batch is trained.

The machine is shared, so every figure depends on what else runs: compare stages with each
other within a run, and runs with each other only in the same minutes (the load average is
recorded with each run). ``job_records.py`` runs the job and reads its logs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from job_records import STAGES, plain_torch_run, run_job

REPO = Path(__file__).resolve().parent.parent


def one_run(data_args: list[str], workdir: Path) -> dict[str, Any]:
    return run_job([sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers",
                    "2", "--workdir", str(workdir), str(REPO / "examples/tabular/train.py"),
                    *data_args], workdir)


def prepare(root: Path, rows: int) -> tuple[Path, Path, Path, float]:
    """The README's data: CSVs from the planted model, converted; (csv, data, test, seconds
    the schema inference and both conversions took)."""
    cli = [sys.executable, "-m", "elasticps"]
    if not (root / "train.csv").exists():
        subprocess.run([sys.executable, str(REPO / "examples/tabular/make_data.py"), "--rows",
                        str(rows), "--out", str(root)], check=True, capture_output=True)
    started = time.monotonic()
    if not (root / "data" / "manifest.json").exists():
        schema = subprocess.run([*cli, "data", "convert", "csv", str(root / "train.csv"),
                                 "--infer"], check=True, capture_output=True, text=True).stdout
        (root / "schema.yaml").write_text(schema)
        subprocess.run([*cli, "data", "convert", "csv", str(root / "train.csv"), "--schema",
                        str(root / "schema.yaml"), "--out", str(root / "data")],
                       check=True, capture_output=True)
        subprocess.run([*cli, "data", "convert", "csv", str(root / "test.csv"), "--schema",
                        str(root / "schema.yaml"), "--like", str(root / "data"), "--out",
                        str(root / "test-data")], check=True, capture_output=True)
    return root / "train.csv", root / "data", root / "test-data", time.monotonic() - started


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    stages = {name: statistics.median(r["stages"][name] for r in runs
                                      if r["stages"].get(name) is not None)
              for name in runs[0]["stages"]
              if any(r["stages"].get(name) is not None for r in runs)}
    return {"first_batch_s": statistics.median(r["first_batch_s"] for r in runs),
            "end_s": statistics.median(r["end_s"] for r in runs),
            "cpu_sum_s": statistics.median(r["cpu_sum_s"] for r in runs),
            "stages": {k: round(v, 3) for k, v in stages.items()}}


def report(result: dict[str, Any], runs: int) -> None:
    medians = result["median"]
    print(f"plain PyTorch (one process, pandas): first trained batch "
          f"{result['plain_torch_median_first_batch_s']:.2f}s (median of {runs})")
    for name, median in medians.items():
        print(f"elasticps run, 2 trainers + 2 pservers, {name}: first trained batch "
              f"{median['first_batch_s']:.2f}s, job end {median['end_s']:.2f}s, CPU at the first "
              f"batch {median['cpu_sum_s']:.2f}s (medians of {runs})")
    names = list(medians)
    print("stage (median seconds after `elasticps run`): " + " | ".join(names))
    for stage in [*(s[0] for s in STAGES), "job end"]:
        if not any(stage in m["stages"] for m in medians.values()):
            continue
        cells = [f"{medians[n]['stages'][stage]:6.2f}" if stage in medians[n]["stages"]
                 else "     -" for n in names]
        print(f"  {stage:24s} " + " | ".join(cells))
    for name, name_runs in result["runs"].items():
        print(f"CPU seconds at the first batch, by role (last {name} run): "
              + json.dumps(name_runs[-1]["cpu_at_first_batch_s"]))
    if result["convert_s"]:
        print(f"schema inference + converting both splits (CLI, before the dataset runs): "
              f"{result['convert_s']:.2f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--data", default=None,
                        help="a directory to keep the CSVs and datasets in (default: a temporary "
                             "one)")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--variants", default="dataset,dataframe",
                        help="which jobs to run: dataset (--data), dataframe (--csv), or both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="job-start-") as tmp:
        root = Path(args.data) if args.data else Path(tmp) / "shop"
        root.mkdir(parents=True, exist_ok=True)
        csv, data, test, convert_s = prepare(root, args.rows)
        variants = {"dataset": ["--data", str(data), "--test-data", str(test)],
                    "dataframe": ["--csv", str(csv), "--test-csv", str(root / "test.csv"),
                                  "--schema", str(root / "schema.yaml")]}
        chosen = args.variants.split(",")
        unknown = sorted(set(chosen) - set(variants))
        if unknown:
            parser.error(f"--variants: unknown {unknown}; choose from {sorted(variants)}")
        variants = {name: variants[name] for name in chosen}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        references = []
        for i in range(args.runs):
            references.append(plain_torch_run(csv))
            line = [f"run {i + 1}: plain PyTorch first batch "
                    f"{references[-1]['first_batch_s']:.2f}s"]
            for name, data_args in variants.items():
                run = one_run(data_args, Path(tmp) / f"job-{name}-{i}")
                runs[name].append(run)
                line.append(f"{name}: first batch {run['first_batch_s']:.2f}s, end "
                            f"{run['end_s']:.2f}s (load {run['load_avg_1m']})")
            print("; ".join(line), flush=True)
    result = {"date": datetime.date.today().isoformat(), "rows": args.rows,
              "convert_s": round(convert_s, 3), "runs": runs, "plain_torch": references,
              "median": {name: summarise(r) for name, r in runs.items()},
              "plain_torch_median_first_batch_s": statistics.median(
                  r["first_batch_s"] for r in references)}
    report(result, args.runs)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
