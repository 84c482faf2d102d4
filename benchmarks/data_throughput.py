"""Throughput of the data pipeline: synthesise, write Criteo text, convert, read batches.

    python benchmarks/data_throughput.py [--rows 1000000] [--json FILE] [--quick]

Steps, on one synthetic dataset of --rows rows:
  synth    elasticps.data.synth.synth_ctr (Parquet, with the planted model's best AUC)
  text     the same rows written as Criteo TSV (the input of the next step)
  convert  elasticps.data.criteo_convert.convert_criteo: TSV -> chunked Parquet, every value
           validated, by the general converter (elasticps.data.convert) with the Criteo preset
  read     elasticps.data.iter_batches over every chunk: hashed ids + normalised dense features
           (median of --repeats passes)
  baseline the classic demo's per-line Python reader (split, float, hash per field) on the
           first --baseline-rows lines of the same TSV; read/baseline is quoted as a ratio
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from elasticps.data import FeatureConfig, iter_batches, open_dataset  # noqa: E402
from elasticps.data.criteo_convert import convert_criteo  # noqa: E402
from elasticps.data.criteo_export import dataset_to_criteo_text  # noqa: E402
from elasticps.data.synth import synth_ctr  # noqa: E402

CONT_MIN = [0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
CONT_DIFF = [20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50]


def classic_reader_rows_per_s(path: Path, rows: int, id_space: int) -> float:
    """The Paddle CTR demo's reader loop (crc32 in place of its salted hash()), per line."""
    started = time.perf_counter()
    done = 0
    with open(path) as lines:
        for line in lines:
            fields = line.rstrip("\n").split("\t")
            dense = [
                0.0 if fields[i] == "" else (float(fields[i]) - CONT_MIN[i - 1]) / CONT_DIFF[i - 1]
                for i in range(1, 14)
            ]
            sparse = [zlib.crc32((str(i) + fields[i]).encode()) % id_space for i in range(14, 40)]
            label = int(fields[0])
            del dense, sparse, label
            done += 1
            if done >= rows:
                break
    return done / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 2 read passes")
    parser.add_argument("--rows-per-chunk", type=int, default=65536)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3, help="read passes (median reported)")
    parser.add_argument("--baseline-rows", type=int, default=100_000)
    parser.add_argument("--workdir", help="keep files here instead of a temporary directory")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.repeats, args.baseline_rows = 100_000, 2, 20_000
    work = Path(args.workdir or tempfile.mkdtemp(prefix="elasticps-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    features = FeatureConfig()
    figures: dict[str, object] = {"rows": args.rows, "rows_per_chunk": args.rows_per_chunk,
                                  "batch_size": args.batch_size, "cpus": os.cpu_count()}
    try:
        t = time.perf_counter()
        synth_ctr(str(work / "synth"), args.rows, 1, rows_per_chunk=args.rows_per_chunk,
                  overwrite=True, progress=False)
        figures["synth_rows_per_s"] = args.rows / (time.perf_counter() - t)

        text = work / "criteo.tsv"
        t = time.perf_counter()
        dataset_to_criteo_text(str(work / "synth"), str(text))
        figures["text_rows_per_s"] = args.rows / (time.perf_counter() - t)
        text_mb = text.stat().st_size / 1e6
        figures["text_mb"] = text_mb

        t = time.perf_counter()
        convert_criteo([str(text)], str(work / "converted"), rows_per_chunk=args.rows_per_chunk,
                       overwrite=True, progress=False)
        elapsed = time.perf_counter() - t
        figures["convert_rows_per_s"] = args.rows / elapsed
        figures["convert_text_mb_per_s"] = text_mb / elapsed
        figures["parquet_mb"] = sum(
            p.stat().st_size for p in (work / "converted").glob("*.parquet")
        ) / 1e6

        ds = open_dataset(str(work / "converted"))
        rates = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            rows = 0
            for chunk in ds.chunks:
                for batch in iter_batches(ds.url, chunk, args.batch_size, features=features):
                    rows += len(batch)
            rates.append(rows / (time.perf_counter() - t))
        read_rate = statistics.median(rates)
        figures["read_rows_per_s"] = read_rate
        figures["read_rows_per_s_all"] = rates
        baseline = classic_reader_rows_per_s(text, args.baseline_rows, features.id_space)
        figures["classic_reader_rows_per_s"] = baseline
        figures["read_speedup_vs_classic"] = read_rate / baseline
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print(f"rows {args.rows:,}, {args.rows_per_chunk:,} rows per chunk, batch {args.batch_size}, "
          f"{os.cpu_count()} CPUs")
    print(f"synth    {figures['synth_rows_per_s']:>12,.0f} rows/s")
    print(f"text     {figures['text_rows_per_s']:>12,.0f} rows/s  ({text_mb:.0f} MB TSV)")
    print(f"convert  {figures['convert_rows_per_s']:>12,.0f} rows/s  "
          f"({figures['convert_text_mb_per_s']:.1f} MB/s of text -> "
          f"{figures['parquet_mb']:.0f} MB Parquet)")
    print(f"read     {figures['read_rows_per_s']:>12,.0f} rows/s  (median of {args.repeats})")
    print(f"classic  {figures['classic_reader_rows_per_s']:>12,.0f} rows/s  per-line Python "
          f"reader; read is {figures['read_speedup_vs_classic']:.1f}x faster")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
