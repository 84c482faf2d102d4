"""``elasticps chaos``: prove a job survives SIGKILLs of every role (see run.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from elasticps.chaos.options import ORACLE_SCRIPT, ChaosOptions
from elasticps.chaos.plan import SCHEDULES
from elasticps.chaos.report import brief, problems
from elasticps.config import MODES
from elasticps.errors import ConfigError

DESCRIPTION = """\
Prove that your training job survives faults. SCRIPT runs under `elasticps run` on this machine
(a leading master and a hot standby, M pservers, N trainers) twice with the same ARGS:
fault-free, then while SIGKILLing processes of every role at seeded random times, and scaling
the trainers up and down. Processes are found through the job's own store records and its
master's status API; only processes the job published for this host are signalled, and a master
kill hits the leader once a standby waits in the election.

The report gives the kills per role; the job's outcome; its AUC against the fault-free run, if
the script publishes one; the exactly-once accounting (duplicates and missing); and per role
how long the job took to serve again and to make progress again. Without --oracle, duplicates
and missing are the job's own record of itself: the applied sets in the shards' final
checkpoints and the master's task records, i.e. the mechanism under test; a bug that loses or
repeats a batch and records it as applied once would not show. For evidence read from the
parameters themselves, run --oracle.

Liveness is asserted: after every fault (kill, scale step, resharding, store outage, pause) the
time until training progresses again (the master's finished tasks plus recovery dispatches, or
some trainer's batches trained as it publishes them every 2 s, grow, or the master says the job
is done) is measured; worst_progress_after_fault_s must stay within
progress_bound_s (--progress-bound; by default 3 x --lease-ttl + 10 s), and no fault may go
--recovery-timeout without progress while the job runs, else the outcome says why it failed.

The exit code is 0 only if the job succeeded under faults and stayed live, every batch was
applied exactly once on every shard, and every kill asked for was delivered. Each kill takes
a few seconds (about a lease TTL plus a restart), so the job must train long enough for
--kills of them: size it through SCRIPT's own arguments.

--oracle runs the parameter-value oracle instead of SCRIPT: a counting model whose gradients do
not depend on the parameters, trained with plain SGD, so its final parameters count how often
each batch was applied on each shard; the report's oracle_mismatches is the number of (pass,
row, shard) counts that are not exactly 1, read from the shards' final checkpoints alone. It
takes every --mode. In sync mode a round applies the mean of its r batches (1/r each, r not
known afterwards: two applications at 1/2 would read as one at 1), so there the counting table
trains with Adagrad (lr 1, eps 0), whose first step on a row is exactly 1 whatever r and whose
later steps add strictly less than 1: a duplicate reads in (1, 2), a loss 0; the dense counter
then counts rounds, checked only to lie in (0, batches]. With
--oracle a store outage is part of the run (--outage, default 12 s; it needs etcd on PATH) and
there is no fault-free run: the counts are checked against the data, not against a baseline.
"""

EPILOG = """\
examples:
  elasticps chaos --kills 3 --seed 148 my_train.py --data /data/ctr --passes 3
      3 kills (seed 148: the leading master, a pserver, a trainer) and a scale step
  elasticps chaos --kills 20 --seed 7 --json chaos.json \\
      examples/ctr/train.py --rows 1800000 --passes 3 --hidden 64,64 --id-space 100003
      the repository's CTR demo: 20 kills of every role in about 4 minutes on 2 cores
  elasticps chaos --kills 24 --seed 7 --oracle --json oracle.json
      24 kills and a 12 s etcd outage on the oracle's counting model (800,000 rows, 3 passes):
      every count must be 1; about 6.5 minutes on 2 cores
  elasticps chaos --oracle --stream --oracle-rows 64000 --kills 3 \
      --schedule stream-commit-master-kill --outage 0
      8 partitions land 3 s apart while the leading master is killed as one commits, then 3
      seeded kills; every row of every partition must be applied once per shard
  elasticps chaos --oracle --mode geo --schedule scale-down-kill-reshard --checkpoint-deltas 2 \
      --kills 20 --reshard 2,3 --json geo.json
      first hole 1's sequence (a pserver killed right after its checkpoint, inside a scale-down
      and a resharding to 3), then 20 seeded kills, scale steps and two more reshardings, on
      delta checkpoints

what lands in --workdir (default ./chaos-run):
  fault-free/, chaos/          each run's launcher workdir: logs/, store.db, checkpoints/,
                               summary.json
  fault-free.out, chaos.out    each launcher's output
  oracle-data/, chaos-etcd/    with --oracle: its dataset; with an outage: the job's etcd

Each run prints its plan (the roles the seed kills, in order) when it starts.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chaos", help="run a job under seeded SIGKILLs of every role and check exactly-once",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    faults = parser.add_argument_group("faults")
    faults.add_argument("--kills", type=int, default=20, metavar="K",
                        help="SIGKILLs to deliver (default 20)")
    faults.add_argument("--seed", type=int, default=1, metavar="S",
                        help="seeds the kills, their targets and the gaps between them (the "
                        "script's own seeds are in its ARGS; default 1)")
    faults.add_argument("--no-scale", action="store_true",
                        help="no trainer scale steps between kills")
    faults.add_argument("--autoscale", action="store_true",
                        help="run the job under the launcher's autoscaler (1 to N+1 trainers, "
                        "a decision every few seconds) instead of the harness's own scale "
                        "steps; the run fails if the autoscaler decided nothing")
    faults.add_argument("--gap", type=float, nargs=2, default=(0.3, 1.5),
                        metavar=("MIN", "MAX"),
                        help="seconds between a recovery and the next step (default 0.3 1.5)")
    job = parser.add_argument_group("the job")
    job.add_argument("--trainers", type=int, default=2, metavar="N", help="(default 2)")
    job.add_argument("--pservers", type=int, default=2, metavar="M", help="(default 2)")
    job.add_argument("--lease-ttl", type=int, default=2, metavar="S",
                     help="PADDLE_LEASE_TTL of the job: a dead process is noticed within it "
                     "(default 2)")
    job.add_argument("--checkpoint-interval", type=float, default=3.0, metavar="S",
                     help="PADDLE_CHECKPOINT_INTERVAL: what a restarted pserver loses "
                     "(default 3)")
    job.add_argument("--checkpoint-deltas", type=int, default=0, metavar="K",
                     help="PADDLE_CHECKPOINT_DELTAS: up to K delta checkpoints between two full "
                     "ones, so restores read a full checkpoint plus deltas (default 0: full "
                     "checkpoints only)")
    job.add_argument("--mode", choices=MODES, default="async",
                     help="the job's training mode, as `elasticps run --mode` (default async; "
                          "--oracle takes every mode)")
    job.add_argument("--workdir", default="chaos-run", metavar="DIR",
                     help="where both runs keep their files (default ./chaos-run)")
    job.add_argument("--skip-baseline", action="store_true",
                     help="no fault-free run (auc_fault_free is then null; always so with "
                     "--oracle, whose check needs no baseline)")
    faults.add_argument("--outage", type=float, default=None, metavar="S",
                        help="take the job's store (its own etcd) down for S seconds once "
                        "(default 12 with --oracle, else 0 = none; needs etcd on PATH)")
    faults.add_argument("--outage-after", type=int, default=None, metavar="K",
                        help="the outage follows the K-th kill (default: half the kills)")
    faults.add_argument("--reshard", type=_counts, default=(), metavar="M[,M...]",
                        help="reshard the job onto M pservers (then the next M...) while it "
                        "runs, spread evenly between the kills, e.g. --reshard 3,2")
    faults.add_argument("--schedule", choices=sorted(SCHEDULES), default=None,
                        help="first carry out this directed schedule, then the seeded random "
                        "steps up to --kills (its kills count): " + "; ".join(
                            f"{name}: {what}" for name, what in SCHEDULES.items()))
    oracle = parser.add_argument_group("the parameter-value oracle")
    oracle.add_argument("--oracle", action="store_true",
                        help="run the oracle's counting model instead of SCRIPT and check "
                        "every batch was applied exactly once per shard in the parameters")
    oracle.add_argument("--oracle-rows", type=int, default=800_000, metavar="N",
                        help="rows of the oracle's dataset (default 800000: long enough "
                        "for about 24 kills)")
    oracle.add_argument("--oracle-passes", type=int, default=None, metavar="P",
                        help="passes (default 3; 1 with --stream, its only choice)")
    oracle.add_argument("--oracle-batch-size", type=int, default=50, metavar="B",
                        help="rows per batch (default 50)")
    oracle.add_argument("--oracle-rows-per-chunk", type=int, default=4_000, metavar="R",
                        help="rows per chunk, i.e. per task (default 4000)")
    oracle.add_argument("--stream", action="store_true",
                        help="the oracle's data is a stream: its rows split into "
                        "--stream-partitions partitions that land (hourly names, manifest "
                        "last) one every --stream-interval seconds once training is under "
                        "way, then its end marker; the job trains it in one pass while the "
                        "faults hit, and every partition must be "
                        "trained through within --stream-bound of its commit")
    oracle.add_argument("--stream-partitions", type=int, default=8, metavar="P",
                        help="partitions of the stream (default 8)")
    oracle.add_argument("--stream-interval", type=float, default=3.0, metavar="S",
                        help="seconds between two partitions landing (default 3)")
    oracle.add_argument("--stream-bound", type=float, default=None, metavar="S",
                        help="liveness of the stream: every partition trained through within S "
                        "of its commit (default --progress-bound + 5)")
    limits = parser.add_argument_group("timeouts (seconds)")
    limits.add_argument("--start-timeout", type=float, default=600.0, metavar="S",
                        help="from the start to the first finished task (default 600)")
    limits.add_argument("--recovery-timeout", type=float, default=60.0, metavar="S",
                        help="per kill, to serve again and to make progress (default 60)")
    limits.add_argument("--progress-bound", type=float, default=None, metavar="S",
                        help="liveness: after every fault (kill, scale step, resharding, store "
                        "outage) training must progress again within S; the run fails if its "
                        "worst case is over (default 3 x --lease-ttl + 10, i.e. 16: the dead "
                        "process noticed, replaced and reached, plus 10 for a process to start "
                        "and restore on a small busy machine)")
    limits.add_argument("--job-timeout", type=float, default=1800.0, metavar="S",
                        help="each run of the job as a whole (default 1800)")
    parser.add_argument("--json", metavar="FILE", help="also write the whole report here")
    parser.add_argument("script", metavar="SCRIPT", nargs="?", default=None,
                        help="the training script every trainer runs, as for `elasticps run` "
                        "(none with --oracle)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="arguments passed to SCRIPT (size the job here)")
    parser.set_defaults(func=chaos_command)


def options_from(args: argparse.Namespace) -> ChaosOptions:
    if args.oracle and args.script is not None:
        raise ConfigError("--oracle runs its own script: give no SCRIPT")
    if not args.oracle and args.script is None:
        raise ConfigError("give the SCRIPT to run (or --oracle)")
    outage = args.outage if args.outage is not None else (12.0 if args.oracle else 0.0)
    return ChaosOptions(
        script=ORACLE_SCRIPT if args.oracle else Path(args.script),
        script_args=tuple(args.script_args), kills=args.kills,
        seed=args.seed, workdir=Path(args.workdir).resolve(), trainers=args.trainers,
        pservers=args.pservers, scale=not (args.no_scale or args.autoscale),
        autoscale=args.autoscale, lease_ttl=args.lease_ttl,
        checkpoint_interval=args.checkpoint_interval,
        checkpoint_deltas=args.checkpoint_deltas, gap=(args.gap[0], args.gap[1]),
        start_timeout=args.start_timeout, recovery_timeout=args.recovery_timeout,
        job_timeout=args.job_timeout, progress_bound=args.progress_bound,
        skip_baseline=args.skip_baseline or args.oracle,
        outage=outage, outage_after=args.outage_after, oracle=args.oracle,
        oracle_rows=args.oracle_rows,
        oracle_passes=args.oracle_passes or (1 if args.stream else 3),
        oracle_batch_size=args.oracle_batch_size, oracle_rows_per_chunk=args.oracle_rows_per_chunk,
        mode=args.mode, reshard=args.reshard, schedule=args.schedule, stream=args.stream,
        stream_partitions=args.stream_partitions, stream_interval=args.stream_interval,
        stream_bound=args.stream_bound)


def _counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of pserver "
                                         "counts, e.g. 3,2") from None


def chaos_command(args: argparse.Namespace) -> int:
    # Imported here, not above: the harness pulls in the checkpoint and snapshot code (~0.2 s),
    # which every other `elasticps` command would otherwise pay for at start.
    from elasticps.chaos.run import run_chaos

    opts = options_from(args)
    opts.validate()
    report = run_chaos(opts)
    print(json.dumps(brief(report), indent=2), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    found = problems(report)
    for problem in found:
        print(f"elasticps chaos: {problem}", file=sys.stderr)
    if not found:
        outages = f", {report['store_outages']} store outage(s)" if report["store_outages"] \
            else ""
        oracle = (f"; the oracle counted {report['oracle_rows_checked']} (pass, row, shard) "
                  "applications in the parameters, every one exactly 1") if report["oracle"] \
            else ""
        reshards = (f", {len(report['reshards'])} resharding(s) (to "
                    f"{', '.join(str(r['pservers']) for r in report['reshards'])} pservers)"
                    if report["reshards"] else "")
        source = "" if report["oracle"] else (
            " by the job's own record (the shards' applied sets and the master's task records; "
            "--oracle counts the parameters instead)")
        scaled = (f"{len(report['autoscale_decisions'])} autoscaler decisions"
                  if report["autoscale"] else f"{report['scales_total']} scale steps")
        print(f"elasticps chaos: the job survived {report['kills_total']} kills{outages}"
              f"{reshards} and {scaled} with every batch applied exactly once"
              f"{source} ({report['expected_batches']} batches over all shards and passes)"
              f"{oracle}; training progressed again within "
              f"{report['worst_progress_after_fault_s']}s of every fault (bound "
              f"{report['progress_bound_s']:g}s)", file=sys.stderr)
    return 1 if found else 0
