"""``elasticps chaos``: the CTR demo under seeded SIGKILLs of every role (see harness.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from elasticps.errors import ConfigError

DESCRIPTION = """\
Run the CTR demo twice with the same seed — fault-free, then while SIGKILLing random processes
of every role (master, pservers, trainers) at seeded random times, and scaling trainers up and
down — and report: kills per role, the job's outcome, the AUC against the fault-free run, the
exactly-once accounting (duplicate and missing batches summed over shards and passes) and the
recovery times per role (kill -> serving again -> training throughput back).
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chaos", help="kill random processes of a running CTR job and check exactly-once",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  elasticps chaos --kills 20 --seed 7 --json chaos.json\n")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to inject (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seeds data, model and faults")
    parser.add_argument("--json", metavar="FILE", help="also write the report here")
    parser.add_argument("--workdir", default="chaos-run", help="where both jobs run")
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--pservers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=None,
                        help="synthetic training rows (default: 12,000 per kill, at least "
                        "120,000, so the job outlasts K kills)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-scale", action="store_true", help="no trainer scaling steps")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="no fault-free run (auc_fault_free is then null)")
    parser.add_argument("--train-args", default="--hidden 64,64 --id-space 100003",
                        help="extra arguments for examples/ctr/train.py")
    parser.set_defaults(func=chaos_command)


def chaos_command(args: argparse.Namespace) -> int:
    from elasticps.chaos.harness import ChaosOptions, run_chaos

    if args.kills < 0:
        raise ConfigError(f"--kills={args.kills} must be >= 0")
    if args.rows is not None and args.rows < 1:
        raise ConfigError(f"--rows={args.rows} must be >= 1")
    opts = ChaosOptions(kills=args.kills, seed=args.seed, workdir=Path(args.workdir).resolve(),
                        trainers=args.trainers, pservers=args.pservers, rows=args.rows,
                        passes=args.passes, scale=not args.no_scale,
                        extra_args=args.train_args.split(), skip_baseline=args.skip_baseline)
    report = run_chaos(opts)
    brief = {k: report[k] for k in ("kills", "kills_total", "kills_planned", "outcome", "auc",
                                    "auc_fault_free", "auc_delta", "duplicates", "missing",
                                    "expected_batches", "recovery", "wall_s", "restarts")}
    print(json.dumps(brief, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if report["kills_short"]:
        print(f"elasticps chaos: only {report['kills_total']} of {report['kills_planned']} "
              f"kills were delivered: {report['kills_short_reason']}", file=sys.stderr)
    ok = (report["outcome"] == "succeeded" and report["duplicates"] == 0
          and report["missing"] == 0 and not report["kills_short"])
    return 0 if ok else 1
