"""Training modes side by side: async (the default), sync and geo, each a real
``elasticps run --trainers 2 --pservers 2 --mode M examples/ctr/train.py`` on the same data.

    python benchmarks/modes.py [--rows 100000] [--geo-steps 10] [--repeat 3] [--quick]
                               [--json FILE]

Every mode reads the same synthetic CTR dataset (generated once into a temporary directory,
or ``--data``) for one pass, with the same model, batch size, optimizer and seed. Reported per
mode: samples per second of training (the job's summary: samples trained / time in the
training loop) and the test AUC of the exported model on the held-out split, with the ratios
against async (what a user runs without ``--mode``). Each repeat runs the three modes in a
rotated order, so drift in the machine's load hits each alike; the load average is recorded
with every run, and medians of ``--repeat`` are reported.
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

from elasticps.data.synth import synth_ctr  # noqa: E402

MODES = ("async", "sync", "geo")


def run_mode(mode: str, data: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One job's summary, and the load around it."""
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "2", "--pservers", "2",
            "--mode", mode, *(["--geo-steps", str(args.geo_steps)] if mode == "geo" else []),
            "--workdir", str(workdir), "--grace", "5", str(REPO / "examples/ctr/train.py"),
            "--data", data, "--passes", "1", "--batch-size", str(args.batch_size),
            "--lr", str(args.lr), "--hidden", args.hidden, "--seed", str(args.seed)]
    load = os.getloadavg()[0]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"elasticps run --mode {mode} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((workdir / "summary.json").read_text())
    return {"samples_per_sec": float(summary["samples_per_sec"]), "auc": float(summary["auc"]),
            "best_auc": float(summary["best_auc"]), "load_before": load,
            "load_after": os.getloadavg()[0]}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"modes": {}}
    for mode, results in runs.items():
        out["modes"][mode] = {
            "samples_per_sec": statistics.median(r["samples_per_sec"] for r in results),
            "auc": statistics.median(r["auc"] for r in results),
            "runs": results,
        }
    base = out["modes"]["async"]
    for figures in out["modes"].values():
        figures["sps_over_async"] = figures["samples_per_sec"] / base["samples_per_sec"]
        figures["auc_minus_async"] = figures["auc"] - base["auc"]
    out["best_auc"] = runs["async"][0]["best_auc"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--test-rows", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--hidden", default="400,400,400")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--geo-steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", help="an existing dataset with a test split (default: "
                        "generate one)")
    parser.add_argument("--quick", action="store_true", help="20k rows, a 64x64 tower, one "
                        "repeat")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.test_rows, args.repeat, args.hidden = 20_000, 5_000, 1, "64,64"
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="elasticps-modes-") as tmp:
        data = args.data
        if data is None:
            data = str(Path(tmp) / "data")
            synth_ctr(data, args.rows, args.seed, test_rows=args.test_rows, progress=False)
        for i in range(args.repeat):
            order = MODES[i % 3:] + MODES[:i % 3]
            for mode in order:
                result = run_mode(mode, data, Path(tmp) / f"{mode}-{i}", args)
                runs[mode].append(result)
                print(f"repeat {i} {mode}: {result['samples_per_sec']:,.0f} samples/s, test auc "
                      f"{result['auc']:.4f}; load {result['load_before']:.1f} -> "
                      f"{result['load_after']:.1f}", flush=True)
    result = summarise(runs)
    result["args"] = {k: v for k, v in vars(args).items() if k != "json"}
    print(f"\n2 trainers, 2 pservers, {args.rows:,} rows, one pass (medians of {args.repeat}); "
          f"best achievable test auc {result['best_auc']:.4f}")
    print(f"{'mode':6} {'samples/s':>10} {'vs async':>9} {'test auc':>9} {'vs async':>9}")
    for mode in MODES:
        f = result["modes"][mode]
        print(f"{mode:6} {f['samples_per_sec']:>10,.0f} {f['sps_over_async']:>8.2f}x "
              f"{f['auc']:>9.4f} {f['auc_minus_async']:>+9.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
