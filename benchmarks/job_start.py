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
  batch`` line, also watched for live every 10 ms), every pass done, and the job's end (the
  launcher's exit);
* the CPU seconds each process had used when the first batch was trained (``/proc``): on two
  cores the start costs at least half their sum, whatever the order.

The reference: a plain PyTorch script (``--plain-torch``, run here in a fresh interpreter)
that reads the same ``train.csv`` with pandas, encodes its columns (category codes, the genres
as bags, the numbers standardised) and trains an embedding + MLP model of the same shape,
printing when its first batch is trained.

The machine is shared, so every figure depends on what else runs: compare stages with each
other within a run, and runs with each other only in the same minutes (the load average is
recorded with each run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
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


def one_run(data_args: list[str], workdir: Path) -> dict[str, Any]:
    shutil.rmtree(workdir, ignore_errors=True)
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
            "--workdir", str(workdir), str(REPO / "examples/tabular/train.py"), *data_args]
    load = os.getloadavg()[0]
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first_batch = None
    cpu: dict[str, float] = {}
    while proc.poll() is None:
        if first_batch is None and (workdir / "logs").is_dir() and \
                first_batch_seen(workdir / "logs"):
            first_batch = time.time() - started
            for pid in children(proc.pid):
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    name = role_of(pid)
                    cpu[name] = round(cpu.get(name, 0.0) + seconds, 2)
            cpu["launcher"] = cpu_seconds(proc.pid) or 0.0
        time.sleep(0.01)
    end = time.time() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"elasticps run failed ({proc.returncode}):\n{stderr[-3000:]}")
    stages: dict[str, float | None] = {}
    for stage, prefix, text, which in STAGES:
        times = log_times(workdir / "logs", prefix, text)
        stages[stage] = round((min(times) if which == "first" else max(times)) - started, 3) \
            if times else None
    stages["job end"] = round(end, 3)
    return {"load_avg_1m": round(load, 2), "first_batch_s": round(first_batch or -1.0, 3),
            "end_s": round(end, 3), "stages": stages, "cpu_at_first_batch_s": cpu,
            "cpu_sum_s": round(sum(cpu.values()), 2)}


def plain_torch_run(csv: Path) -> dict[str, Any]:
    """The one-process script in a fresh interpreter; its time to its first trained batch."""
    started = time.time()
    done = subprocess.run([sys.executable, __file__, "--plain-torch", str(csv)], check=True,
                          capture_output=True, text=True)
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    return {"first_batch_s": round(marks["first_batch"] - started, 3),
            "data_ready_s": round(marks["data_ready"] - started, 3),
            "torch_imported_s": round(marks["torch_imported"] - started, 3),
            "end_s": round(time.time() - started, 3)}


def plain_torch(csv: str, batch_size: int = 512) -> None:
    """What a PyTorch user writes for this CSV, up to its first trained batch."""
    marks = {}
    import numpy as np
    import pandas as pd
    import torch

    marks["torch_imported"] = time.time()
    frame = pd.read_csv(csv)
    label = torch.tensor(frame.pop("clicked").to_numpy(np.float32))
    dense = frame[["age", "income"]].astype("float64")
    dense = ((dense - dense.mean()) / dense.std()).fillna(0.0)
    dense_t = torch.tensor(dense.to_numpy(np.float32))
    ids = {name: torch.tensor(frame[name].astype("category").cat.codes.to_numpy(np.int64) + 1)
           for name in ("country", "device", "user_id")}
    genres = frame["genres"].fillna("").str.split("|")
    vocab = {g: i + 1 for i, g in enumerate(sorted({g for gs in genres for g in gs if g}))}
    flat = [vocab[g] for gs in genres for g in gs if g]
    lengths = torch.tensor([sum(1 for g in gs if g) for gs in genres])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.tensor(flat, dtype=torch.int64)
    marks["data_ready"] = time.time()

    dim = 8
    tables = torch.nn.ModuleDict({n: torch.nn.Embedding(int(t.max()) + 1, dim)
                                  for n, t in ids.items()})
    bag = torch.nn.EmbeddingBag(len(vocab) + 1, dim, mode="mean")
    mlp = torch.nn.Sequential(torch.nn.Linear(4 * dim + 2, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    params = [*tables.parameters(), *bag.parameters(), *mlp.parameters()]
    optimizer = torch.optim.Adagrad(params, lr=0.05)
    rows = len(label)
    for start in range(0, rows, batch_size):
        end = min(rows, start + batch_size)
        lo, hi = int(offsets[start]), int(offsets[end])
        bags = bag(values[lo:hi], offsets[start:end] - lo)
        parts = [tables[n](t[start:end]) for n, t in ids.items()]
        logit = mlp(torch.cat([dense_t[start:end], bags, *parts], 1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label[start:end])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        marks["first_batch"] = time.time()
        break  # the start is what is compared
    print(json.dumps(marks), flush=True)


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
    parser.add_argument("--plain-torch", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_torch:
        plain_torch(args.plain_torch)
        return 0
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
