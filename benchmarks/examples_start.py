"""Every example's time to its first trained batch and its wall time, as a local job, beside a
one-process PyTorch script's time to its first batch.

    python benchmarks/examples_start.py [--examples NAME,...] [--repeat 3] [--json FILE]
                                        [--trainers 1] [--pservers 1] [--data DIR] [--quick]

Each example runs as its documentation runs it (the README's commands), on the data its own
``make_data.py`` / ``make_corpus.py`` makes at the sizes in ``EXAMPLES`` (the CTR demo makes
its own in the job), with ``--trainers 1 --pservers 1`` unless told otherwise. Making and
converting the data happens once, before any job, and is not in the figures (its seconds are
in the JSON as ``prepare_s``). For every run, from the moment ``elasticps run`` is started
(``job_records.run_job``): the first trained batch (the first trainer log line ``trained its
first batch``, by its timestamp) and the end (the launcher's exit; the job's passes, export,
test scoring and shutdown).

The reference: ``plain_torch_start.py`` in a fresh interpreter (pandas reads the tabular
example's ``train.csv``, an embedding + MLP model trains one batch), once per repetition. The
table's ratios divide each example's medians by the reference's median first batch.

``--repeat N`` runs every chosen example N times, interleaved (example 1, 2, ..., then again),
and reports medians. ``--quick``: tiny data and one pass, for a smoke test of the report. The
machine's load is recorded with each run: on a shared machine, compare figures only within one
run of this script.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from job_records import plain_torch_run, run_job
from run_facts import cpu_model

REPO = Path(__file__).resolve().parent.parent
ELASTICPS = [sys.executable, "-m", "elasticps"]


@dataclass(frozen=True)
class Example:
    """One example as its documentation runs it. ``args`` are the script's arguments, with
    ``{data}`` for the directory its data set ``data`` was made in."""

    shows: str
    script: str
    data: str | None
    args: tuple[str, ...] = ()


def make_tabular(root: Path, rows: int) -> None:
    python(REPO / "examples/tabular/make_data.py", "--rows", str(rows), "--out", str(root))
    schema = subprocess.run([*ELASTICPS, "data", "convert", "csv", str(root / "train.csv"),
                             "--infer"], check=True, capture_output=True, text=True).stdout
    (root / "schema.yaml").write_text(schema)
    cli("data", "convert", "csv", str(root / "train.csv"), "--schema",
        str(root / "schema.yaml"), "--out", str(root / "data"))
    cli("data", "convert", "csv", str(root / "test.csv"), "--schema", str(root / "schema.yaml"),
        "--like", str(root / "data"), "--out", str(root / "test-data"))


def make_ngram(root: Path, rows: int) -> None:
    python(REPO / "examples/ngram/make_corpus.py", "--sentences", str(rows // 8), "--out",
           str(root))
    cli("data", "convert", "text", str(root / "corpus.txt"), "--ngram", "3", "--out",
        str(root / "data"))


def make_multitask(root: Path, rows: int) -> None:
    python(REPO / "examples/multitask/make_data.py", "--rows", str(rows), "--test-rows",
           str(rows // 4), "--out", str(root))
    cli("data", "convert", "csv", str(root / "train.csv"), "--schema",
        str(root / "schema.yaml"), "--out", str(root / "data"), "--rows-per-chunk",
        str(max(1, rows // 8)))
    cli("data", "convert", "csv", str(root / "test.csv"), "--schema", str(root / "schema.yaml"),
        "--like", str(root / "data"), "--out", str(root / "test-data"))


def make_datasets(script: str) -> Callable[[Path, int], None]:
    """The examples whose ``make_data.py`` writes the train and test datasets itself."""
    def make(root: Path, rows: int) -> None:
        python(REPO / script, "--rows", str(rows), "--test-rows", str(max(512, rows // 10)),
               "--rows-per-chunk", str(max(1, rows // 5)), "--out", str(root))
    return make


# The data sets, each made once: name -> (maker, training rows, rows with --quick). The sizes
# are the examples' own defaults (the n-gram corpus: 20,000 sentences, about 155,000 rows).
DATA: dict[str, tuple[Callable[[Path, int], None], int, int]] = {
    "tabular": (make_tabular, 50_000, 2_000),
    "ngram": (make_ngram, 160_000, 4_000),
    "two_tower": (make_datasets("examples/two_tower/make_data.py"), 50_000, 2_000),
    "multitask": (make_multitask, 40_000, 2_000),
    "sequence": (make_datasets("examples/sequence/make_data.py"), 50_000, 2_000),
}
CTR_ROWS, CTR_QUICK_ROWS = 100_000, 2_000

EXAMPLES: dict[str, Example] = {
    "ctr": Example("the CTR demo: CTR-DNN on Criteo-like rows one trainer generates in the job "
                   "(`--rows`), export, test AUC", "examples/ctr/train.py", None),
    "tabular": Example("a model built from a converted table's schema (`dnn`), test AUC",
                       "examples/tabular/train.py", "tabular",
                       ("--data", "{data}/data", "--test-data", "{data}/test-data")),
    "tabular-wide_deep": Example("the same with a linear part (`--model wide_deep`)",
                                 "examples/tabular/train.py", "tabular",
                                 ("--data", "{data}/data", "--test-data", "{data}/test-data",
                                  "--model", "wide_deep")),
    "tabular-deepfm": Example("the same with a factorization machine (`--model deepfm`)",
                              "examples/tabular/train.py", "tabular",
                              ("--data", "{data}/data", "--test-data", "{data}/test-data",
                               "--model", "deepfm")),
    "tabular-csv": Example("the CSV files as DataFrames, written once as the job's datasets "
                           "(no conversion step)", "examples/tabular/train.py", "tabular",
                           ("--csv", "{data}/train.csv", "--test-csv", "{data}/test.csv",
                            "--schema", "{data}/schema.yaml")),
    "ngram": Example("an N-gram word model on converted text, test perplexity",
                     "examples/ngram/train.py", "ngram", ("--data", "{data}/data")),
    "ngram-text": Example("the same, the text converted inside the job (`--text`)",
                          "examples/ngram/train.py", "ngram", ("--text", "{data}/corpus.txt")),
    "two_tower": Example("a retriever: [B, B + 64] scores, its own loss and metric (recall@10), "
                         "AdamW, warm-up + cosine", "examples/two_tower/train.py", "two_tower",
                         ("--data", "{data}/train", "--test-data", "{data}/test",
                          "--negatives", "64", "--schedule", "cosine", "--warmup-steps", "50")),
    "multitask": Example("three labels of three kinds, one head each",
                         "examples/multitask/train.py", "multitask",
                         ("--data", "{data}/data", "--test-data", "{data}/test-data",
                          "--weights", "click=1,dwell=0.5,topic=1")),
    "sequence": Example("attention over a user's history ([B, L, dim] and a mask), test AUC",
                        "examples/sequence/train.py", "sequence",
                        ("--data", "{data}/train", "--test-data", "{data}/test")),
}


def python(script: Path, *args: str) -> None:
    subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True)


def cli(*args: str) -> None:
    subprocess.run([*ELASTICPS, *args], check=True, capture_output=True)


def script_args(name: str, data_root: Path, quick: bool) -> list[str]:
    example = EXAMPLES[name]
    args = [arg.replace("{data}", str(data_root / (example.data or ""))) for arg in example.args]
    if name == "ctr":
        args += ["--rows", str(CTR_QUICK_ROWS if quick else CTR_ROWS)]
    if quick:
        args += ["--passes", "1"]
    return args


def job_argv(name: str, workdir: Path, args: list[str], trainers: int,
             pservers: int) -> list[str]:
    return [*ELASTICPS, "run", "--trainers", str(trainers), "--pservers", str(pservers),
            "--workdir", str(workdir), str(REPO / EXAMPLES[name].script), *args]


def prepare(names: list[str], data_root: Path, quick: bool) -> dict[str, float]:
    """Make every data set the chosen examples (and the reference: the tabular CSV) read,
    unless ``data_root`` already holds it; seconds each took."""
    wanted = {"tabular"} | {EXAMPLES[n].data for n in names if EXAMPLES[n].data}
    seconds = {}
    for data in sorted(d for d in wanted if d is not None):
        root = data_root / data
        if (root / "made").exists():
            continue
        maker, rows, quick_rows = DATA[data]
        started = time.monotonic()
        maker(root, quick_rows if quick else rows)
        (root / "made").write_text("")
        seconds[data] = round(time.monotonic() - started, 3)
    return seconds


def median(runs: list[dict[str, Any]], key: str) -> float:
    return round(float(statistics.median(r[key] for r in runs)), 3)


def summarise(result: dict[str, Any]) -> None:
    """Medians of each example's runs and their ratios to the reference's first batch."""
    reference = median(result["plain_torch"]["runs"], "first_batch_s")
    for key in ("torch_imported_s", "data_ready_s", "first_batch_s", "end_s"):
        result["plain_torch"][key] = median(result["plain_torch"]["runs"], key)
    for entry in result["examples"].values():
        entry["first_batch_s"] = median(entry["runs"], "first_batch_s")
        entry["end_s"] = median(entry["runs"], "end_s")
        entry["first_batch_ratio"] = round(entry["first_batch_s"] / reference, 2)
        entry["end_ratio"] = round(entry["end_s"] / reference, 2)


def report(result: dict[str, Any]) -> None:
    reference = result["plain_torch"]["first_batch_s"]
    print(f"{result['cpu_model']}, {os.cpu_count()} cores; {result['trainers']} trainer(s) + "
          f"{result['pservers']} pserver(s); medians of {result['repeat']}; load average "
          f"{result['load_avg_1m_before']} before, {result['load_avg_1m_after']} after")
    print(f"{'example':18s} {'first batch':>11s} {'÷ torch':>8s} {'total':>7s} {'÷ torch':>8s}")
    for name, entry in result["examples"].items():
        print(f"{name:18s} {entry['first_batch_s']:10.2f}s {entry['first_batch_ratio']:7.2f}x "
              f"{entry['end_s']:6.2f}s {entry['end_ratio']:7.2f}x")
    print(f"{'plain PyTorch':18s} {reference:10.2f}s {1.0:7.2f}x "
          f"{result['plain_torch']['end_s']:6.2f}s  (one process, its first batch only)")
    print(f"plain PyTorch: torch imported at {result['plain_torch']['torch_imported_s']:.2f}s, "
          f"the CSV read and encoded at {result['plain_torch']['data_ready_s']:.2f}s")
    print("÷ torch: the figure divided by the plain PyTorch script's first batch")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES),
                        help=f"a comma-separated subset of {', '.join(EXAMPLES)}")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (medians)")
    parser.add_argument("--trainers", type=int, default=1)
    parser.add_argument("--pservers", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--data", default=None,
                        help="a directory to make the data in and keep it (default: temporary)")
    parser.add_argument("--quick", action="store_true", help="tiny data, one pass")
    args = parser.parse_args(argv)
    unknown = [n for n in args.examples.split(",") if n not in EXAMPLES]
    if unknown:
        parser.error(f"--examples: unknown {unknown}; choose from {', '.join(EXAMPLES)}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.examples.split(",")
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "cpu_model": cpu_model(),
        "cores": os.cpu_count(), "trainers": args.trainers, "pservers": args.pservers,
        "repeat": args.repeat, "quick": args.quick,
        "load_avg_1m_before": round(os.getloadavg()[0], 2), "plain_torch": {"runs": []},
        "examples": {}}
    with tempfile.TemporaryDirectory(prefix="examples-start-") as tmp:
        data_root = Path(args.data) if args.data else Path(tmp) / "data"
        result["prepare_s"] = prepare(names, data_root, args.quick)
        for name in names:
            args_of = script_args(name, data_root, args.quick)
            command = " ".join(job_argv(name, Path("W"), args_of, args.trainers,
                                        args.pservers)[2:])
            result["examples"][name] = {
                "shows": EXAMPLES[name].shows, "runs": [],
                "command": command.replace(str(data_root), "DATA").replace(f"{REPO}/", "")}
        for i in range(args.repeat):
            result["plain_torch"]["runs"].append(
                plain_torch_run(data_root / "tabular" / "train.csv"))
            for name in names:
                workdir = Path(tmp) / f"job-{name}-{i}"
                run = run_job(job_argv(name, workdir, script_args(name, data_root, args.quick),
                                       args.trainers, args.pservers), workdir)
                result["examples"][name]["runs"].append(run)
                print(f"run {i + 1} {name}: first batch {run['first_batch_s']:.2f}s, end "
                      f"{run['end_s']:.2f}s (load {run['load_avg_1m']})", flush=True)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    summarise(result)
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
