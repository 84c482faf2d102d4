"""``elasticps chaos`` from start to report.

:func:`run_chaos` runs the user's script twice with the same arguments, each run in its own
workdir (its own embedded store, data and checkpoints): fault-free first (unless
``skip_baseline``), then under :class:`~elasticps.chaos.loop.ChaosLoop`; with a store outage
planned, the run under faults uses its own etcd (:mod:`elasticps.chaos.etcd`) that the outage
takes down. At the end it reads the exactly-once accounting from durable state
(:mod:`elasticps.chaos.accounting`), with ``oracle`` counts every batch's applications in the
parameters (:mod:`elasticps.chaos.oracle`), and builds the report (:mod:`elasticps.chaos.report`).
With ``oracle`` the script is the oracle's own, on data it writes once for both runs; with
``stream`` too, the data is a stream whose partitions land while the job runs
(:mod:`elasticps.chaos.stream_writer`), and the report times every partition.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from typing import Any

from elasticps.chaos.accounting import job_accounting
from elasticps.chaos.etcd import outage_etcd
from elasticps.chaos.job import LaunchedJob, Say
from elasticps.chaos.job_watch import ChaosWatch
from elasticps.chaos.loop import ChaosLoop
from elasticps.chaos.options import ORACLE_SCRIPT, ChaosOptions
from elasticps.chaos.oracle import OracleSpec, check_oracle, oracle_args, write_oracle_data
from elasticps.chaos.plan import SCHEDULES, KillRole, Planner, directed, directed_kills, preview
from elasticps.chaos.report import ChaosRecord, JobRun, build_report
from elasticps.chaos.stream_writer import LandingWatch, StreamWriter
from elasticps.errors import ElasticPSError
from elasticps.launch.scale import set_desired_trainers, write_desired_pservers
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


def run_under_faults(opts: ChaosOptions, say: Say,
                     writer: StreamWriter | None = None) -> ChaosRecord:
    """The run under faults; ``writer`` (with ``opts.stream``) lands the stream's partitions
    once training is under way (its first has landed)."""
    workdir = opts.workdir / "chaos"
    output = opts.workdir / "chaos.out"
    planned = [s.role if isinstance(s, KillRole) else f"scale to {s.trainers}"
               for s in preview(opts.seed, opts.kills, opts.trainers, scale=opts.scale,
                                gap=opts.gap)]
    if opts.schedule:
        steps = directed(opts.schedule, opts.trainers, opts.pservers, opts.lease_ttl)
        say(f"chaos: schedule {opts.schedule} first: {SCHEDULES[opts.schedule]} "
            f"({', '.join(type(s).__name__ for s in steps)}; {directed_kills(steps)} kill(s) "
            "of --kills)")
    say(f"chaos: run under faults in {workdir} (output in {output}); seed {opts.seed} plans: "
        f"{', '.join(planned) or 'no kills'}")
    with contextlib.ExitStack() as stack:
        etcd = None
        if opts.outage > 0:
            etcd = stack.enter_context(outage_etcd(opts.workdir / "chaos-etcd"))
            say(f"chaos: the job runs on its own etcd at {etcd.url} (a store outage of "
                f"{opts.outage:g}s follows kill {opts.outage_at})")
        job = stack.enter_context(LaunchedJob(opts, workdir, output,
                                              etcd.url if etcd is not None else None))
        deadline = time.monotonic() + opts.start_timeout
        location = job.wait_for_location(deadline)
        if location is None:
            say(f"chaos: the launcher wrote no job.json within --start-timeout; stopping it "
                f"(output in {output})")
            return ChaosRecord(job.finish(0.0, say, "it never published where its store is"),
                               accounting_error="the job never published where its store is")
        store = stack.enter_context(open_store(*location))
        planner = Planner(opts.seed, opts.trainers, scale=opts.scale, gap=opts.gap)
        loop = ChaosLoop(opts, job, ChaosWatch(store), planner,
                         lambda n: set_desired_trainers(*location, n), say, store=etcd,
                         reshard_to=lambda m: write_desired_pservers(store, m, "chaos"),
                         landings=writer)
        if writer is not None:  # timed on its own store handle, beside the loop
            stack.callback(writer.stop)
            watch = ChaosWatch(stack.enter_context(open_store(*location)))
            stack.enter_context(LandingWatch(writer, watch, lambda: job.running))
            say(f"chaos: the stream's partitions land every {opts.stream_interval:g}s once "
                f"training is under way ({opts.stream_partitions} of {opts.stream_rows} rows)")
        loop.run(deadline, on_start=writer.start if writer is not None else None)
        stalled = loop.tail_stall is not None
        left = 0.0 if stalled else opts.job_timeout - (time.monotonic() - job.started)
        why = (f"no training progress for {loop.tail_stall:.0f}s after the last fault"
               if stalled else "it ran past --job-timeout")
        record = ChaosRecord(
            job.finish(left, say, why),
            loop.kills, loop.scales, outages=loop.outages, reshards=loop.reshards,
            pauses=loop.pauses, directed=loop.directed_done, tail_stall_s=loop.tail_stall)
        _account(record, store, opts)
        if writer is not None:
            writer.stop()
            record.stream = writer.report(opts.stream_bound_s)
        if opts.oracle:
            record.oracle = _oracle(record, store, opts)
    return record


def stream_writer(opts: ChaosOptions) -> StreamWriter:
    """The writer of the oracle's stream (its prefix under the run's workdir)."""
    return StreamWriter(oracle_spec(opts).data, opts.stream_partitions, opts.stream_rows,
                        opts.oracle_rows_per_chunk, opts.stream_interval)


def _account(record: ChaosRecord, store: Store, opts: ChaosOptions) -> None:
    checkpoints = str(record.job.workdir / "checkpoints")  # where the launcher puts them
    try:
        record.accounting = job_accounting(store, checkpoints, opts.pservers)
    except (ElasticPSError, OSError, ValueError) as exc:  # store, checkpoint or record trouble
        record.accounting_error = f"{type(exc).__name__}: {exc}"


def oracle_spec(opts: ChaosOptions) -> OracleSpec:
    if opts.stream:
        return OracleSpec(str(opts.workdir / "oracle-stream"), 1, opts.oracle_batch_size,
                          opts.pservers, opts.mode, stream=True)
    return OracleSpec(str(opts.workdir / "oracle-data"), opts.oracle_passes,
                      opts.oracle_batch_size, opts.pservers, opts.mode)


def with_oracle(opts: ChaosOptions, say: Say,
                writer: StreamWriter | None = None) -> ChaosOptions:
    """``opts`` running the oracle's script on its data, written here once for both runs (a
    stream's first partition only, by ``writer``: the rest land while the job runs under
    faults)."""
    spec = oracle_spec(opts)
    if opts.stream:
        say(f"chaos: the oracle's stream under {spec.data}: {opts.stream_partitions} "
            f"partitions of {opts.stream_rows} rows in chunks of {opts.oracle_rows_per_chunk}, "
            f"one pass of batches of {opts.oracle_batch_size} on {opts.pservers} pservers")
        shutil.rmtree(spec.data, ignore_errors=True)  # a rerun in the same workdir starts over
        assert writer is not None
        writer.land_first()
        rows = opts.stream_partitions * opts.stream_rows
        return dataclasses.replace(opts, script=ORACLE_SCRIPT,
                                   script_args=tuple(oracle_args(spec, rows)))
    say(f"chaos: the oracle writes {opts.oracle_rows} rows in chunks of "
        f"{opts.oracle_rows_per_chunk} to {spec.data}; {opts.oracle_passes} passes of batches of "
        f"{opts.oracle_batch_size} on {opts.pservers} pservers")
    write_oracle_data(spec.data, opts.oracle_rows, opts.oracle_rows_per_chunk)
    return dataclasses.replace(opts, script=ORACLE_SCRIPT, script_args=tuple(oracle_args(spec)))


def _oracle(record: ChaosRecord, store: Store, opts: ChaosOptions) -> dict[str, Any]:
    checkpoints = str(record.job.workdir / "checkpoints")
    try:
        return check_oracle(oracle_spec(opts), checkpoints, store).as_dict()
    except (ElasticPSError, OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _print(line: str) -> None:
    print(line, flush=True)


def run_chaos(opts: ChaosOptions, say: Say = _print) -> dict[str, Any]:
    """Both runs and the report (see :func:`elasticps.chaos.report.build_report`)."""
    opts.workdir.mkdir(parents=True, exist_ok=True)
    writer = stream_writer(opts) if opts.stream else None
    if opts.oracle:
        opts = with_oracle(opts, say, writer)
    opts.validate()
    baseline = None if opts.skip_baseline else run_fault_free(opts, say)
    if baseline is not None and not baseline.succeeded:
        return build_report(opts, None, baseline)
    chaos = run_under_faults(opts, say, writer)
    return build_report(opts, chaos, baseline)
