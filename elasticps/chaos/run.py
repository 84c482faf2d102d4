"""``elasticps chaos`` from start to report.

:func:`run_chaos` runs the user's script twice with the same arguments, each run in its own
workdir (its own embedded store, data and checkpoints): fault-free first (unless
``skip_baseline``), then under :class:`~elasticps.chaos.loop.ChaosLoop`. At the end it reads the
exactly-once accounting from durable state (:mod:`elasticps.chaos.accounting`) and builds the
report (:mod:`elasticps.chaos.report`).
"""

from __future__ import annotations

import time
from typing import Any

from elasticps.chaos.accounting import job_accounting
from elasticps.chaos.job import LaunchedJob, Say
from elasticps.chaos.loop import ChaosLoop
from elasticps.chaos.observe import JobObserver
from elasticps.chaos.options import ChaosOptions
from elasticps.chaos.plan import KillRole, Planner, preview
from elasticps.chaos.report import ChaosRecord, JobRun, build_report
from elasticps.errors import ElasticPSError
from elasticps.launch.scale import set_desired_trainers
from elasticps.store import Store, open_store


def run_fault_free(opts: ChaosOptions, say: Say) -> JobRun:
    workdir = opts.workdir / "fault-free"
    output = opts.workdir / "fault-free.out"
    say(f"chaos: fault-free run of {opts.script} in {workdir} (output in {output})")
    with LaunchedJob(opts, workdir, output) as job:
        run = job.finish(opts.job_timeout, say)
    say(f"chaos: the fault-free run {'succeeded' if run.succeeded else 'failed'} in "
        f"{run.wall_s:.1f}s")
    return run


def run_under_faults(opts: ChaosOptions, say: Say) -> ChaosRecord:
    workdir = opts.workdir / "chaos"
    output = opts.workdir / "chaos.out"
    planned = [s.role if isinstance(s, KillRole) else f"scale to {s.trainers}"
               for s in preview(opts.seed, opts.kills, opts.trainers, scale=opts.scale,
                                gap=opts.gap)]
    say(f"chaos: run under faults in {workdir} (output in {output}); seed {opts.seed} plans: "
        f"{', '.join(planned) or 'no kills'}")
    with LaunchedJob(opts, workdir, output) as job:
        deadline = time.monotonic() + opts.start_timeout
        location = job.wait_for_location(deadline)
        if location is None:
            say(f"chaos: the launcher wrote no job.json within --start-timeout; stopping it "
                f"(output in {output})")
            return ChaosRecord(job.finish(0.0, say),
                               accounting_error="the job never published where its store is")
        with open_store(*location) as store:
            planner = Planner(opts.seed, opts.trainers, scale=opts.scale, gap=opts.gap)
            loop = ChaosLoop(opts, job, JobObserver(store), planner,
                             lambda n: set_desired_trainers(*location, n), say)
            loop.run(deadline)
            record = ChaosRecord(
                job.finish(opts.job_timeout - (time.monotonic() - job.started), say),
                loop.kills, loop.scales)
            _account(record, store, opts)
    return record


def _account(record: ChaosRecord, store: Store, opts: ChaosOptions) -> None:
    checkpoints = str(record.job.workdir / "checkpoints")  # where the launcher puts them
    try:
        record.accounting = job_accounting(store, checkpoints, opts.pservers)
    except (ElasticPSError, OSError, ValueError) as exc:  # store, checkpoint or record trouble
        record.accounting_error = f"{type(exc).__name__}: {exc}"


def _print(line: str) -> None:
    print(line, flush=True)


def run_chaos(opts: ChaosOptions, say: Say = _print) -> dict[str, Any]:
    """Both runs and the report (see :func:`elasticps.chaos.report.build_report`)."""
    opts.validate()
    opts.workdir.mkdir(parents=True, exist_ok=True)
    baseline = None if opts.skip_baseline else run_fault_free(opts, say)
    if baseline is not None and not baseline.succeeded:
        return build_report(opts, None, baseline)
    chaos = run_under_faults(opts, say)
    return build_report(opts, chaos, baseline)
