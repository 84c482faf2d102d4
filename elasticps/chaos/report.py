"""The chaos report: what was done to the job, how it recovered, and whether it proved anything.

Pure: built from the records of the runs (:class:`JobRun`, :class:`KillRecord`) and the
exactly-once accounting; :func:`problems` says why ``elasticps chaos`` must exit non-zero.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from elasticps.chaos.options import ChaosOptions
from elasticps.chaos.targets import ROLES

# The keys printed on the terminal; the --json file holds the whole report.
BRIEF_KEYS = ("kills", "kills_total", "kills_planned", "scales_total", "autoscale_decisions",
              "store_outages",
              "outcome", "auc", "auc_fault_free", "auc_delta", "accounting_source",
              "duplicates", "missing",
              "expected_batches", "oracle_rows_checked", "oracle_mismatches",
              "worst_progress_after_fault_s", "worst_fault", "progress_bound_s", "recovery",
              "wall_s", "restarts", "stream_worst_trained_s")


@dataclass
class KillRecord:
    """One SIGKILL and how long its role took to come back (None: not within the timeout)."""

    role: str
    pid: int
    name: str  # the leader's node, the pserver's slot, or the trainer's name
    at: float  # wall-clock time of the kill
    serving_s: float | None = None  # kill -> the role serves again
    throughput_s: float | None = None  # kill -> the master counts new progress
    stalled: bool = False  # no progress within --recovery-timeout while the job ran


@dataclass
class OutageRecord:
    """One store outage: etcd SIGKILLed at ``at``, restarted ``down_s`` later."""

    at: float
    down_s: float
    serving_s: float | None = None  # etcd back -> the leading master's status answers
    throughput_s: float | None = None  # etcd back -> the master counts new progress
    stalled: bool = False


@dataclass
class ScaleRecord:
    at: float
    trainers: int
    settled_s: float | None = None  # asked -> that many trainers registered and not leaving
    throughput_s: float | None = None  # asked -> the master counts new progress
    stalled: bool = False


@dataclass
class ReshardRecord:
    """One resharding: asked at ``at`` (unix), to ``pservers``; ``serving_s`` until every new
    slot was served under the new layout, ``throughput_s`` until tasks finished again."""

    at: float
    pservers: int
    killed: str = ""  # the pserver SIGKILLed as it began (its unsaved pushes cut the batches)
    serving_s: float | None = None
    throughput_s: float | None = None
    stalled: bool = False


@dataclass
class PauseRecord:
    """A trainer SIGSTOPped at ``at`` for ``seconds`` (schedule slow-sync-member), then
    SIGCONTed: how long the others took to progress, and progress after it woke."""

    at: float
    trainer: str
    seconds: float
    throughput_s: float | None = None  # stopped -> the master counts new progress
    stalled: bool = False
    after_wake_s: float | None = None  # SIGCONT -> new progress
    wake_stalled: bool = False


@dataclass(frozen=True)
class JobRun:
    """One run of the job under ``elasticps run``."""

    exit_code: int
    wall_s: float
    workdir: Path
    output: Path  # the launcher's stdout and stderr
    summary: Mapping[str, Any] = field(default_factory=dict)  # WORKDIR/summary.json

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    @property
    def auc(self) -> float | None:
        """The job's published AUC, if its script publishes one (the CTR demo does)."""
        auc = self.summary.get("auc")
        return float(auc) if isinstance(auc, int | float) and not isinstance(auc, bool) else None


@dataclass
class ChaosRecord:
    """The run under faults: the job, what was done to it, and the accounting afterwards."""

    job: JobRun
    kills: list[KillRecord] = field(default_factory=list)
    scales: list[ScaleRecord] = field(default_factory=list)
    accounting: Mapping[str, Any] | None = None  # None: could not be computed
    accounting_error: str | None = None
    outages: list[OutageRecord] = field(default_factory=list)
    oracle: Mapping[str, Any] | None = None  # chaos/oracle.py's result, with --oracle
    reshards: list[ReshardRecord] = field(default_factory=list)
    pauses: list[PauseRecord] = field(default_factory=list)
    directed: list[str] = field(default_factory=list)  # the schedule's steps as carried out
    # Seconds without progress, while the job ran, after the last fault (then it was stopped).
    tail_stall_s: float | None = None
    # With --stream: its partitions, when each landed and how soon it was appended and trained
    # through (chaos/stream_writer.py's StreamWriter.report).
    stream: Mapping[str, Any] | None = None


def recovery_stats(values: Sequence[float | None]) -> dict[str, float | int | None]:
    done = [v for v in values if v is not None]
    return {"n": len(values), "recovered": len(done),
            "median_s": round(statistics.median(done), 3) if done else None,
            "max_s": round(max(done), 3) if done else None}


def faults_of(chaos: ChaosRecord) -> list[tuple[str, float | None, bool]]:
    """Every fault of the run as (what, seconds until training progressed again, stalled), in
    the order they happened."""
    faults: list[tuple[float, str, float | None, bool]] = []
    for n, k in enumerate(chaos.kills, 1):
        faults.append((k.at, f"kill {n} ({k.role} {k.name})", k.throughput_s, k.stalled))
    for s in chaos.scales:
        faults.append((s.at, f"scale to {s.trainers} trainers", s.throughput_s, s.stalled))
    for r in chaos.reshards:
        faults.append((r.at, f"reshard to {r.pservers} pservers", r.throughput_s, r.stalled))
    for o in chaos.outages:
        faults.append((o.at, f"store outage of {o.down_s:g}s (timed from etcd's restart)",
                       o.throughput_s, o.stalled))
    for pause in chaos.pauses:
        faults.append((pause.at, f"SIGSTOP of trainer {pause.trainer} for {pause.seconds:g}s",
                       pause.throughput_s, pause.stalled))
        faults.append((pause.at + pause.seconds, f"SIGCONT of trainer {pause.trainer}",
                       pause.after_wake_s, pause.wake_stalled))
    ordered = [(what, seconds, stalled) for _, what, seconds, stalled in sorted(faults)]
    if chaos.tail_stall_s is not None:
        ordered.append((f"the last fault (no progress for {chaos.tail_stall_s:.0f}s later on; "
                        "the job was stopped)", None, True))
    return ordered


def liveness(faults: Sequence[tuple[str, float | None, bool]], bound: float,
             timeout: float) -> dict[str, Any]:
    """The worst time from a fault to training's next progress, against ``bound``. A stalled
    fault (no progress within ``timeout`` while the job ran) counts as ``timeout``, a lower
    bound of its real time, and fails whatever ``bound``; a fault after which the job ended
    before anything could progress (None, not stalled) is not counted."""
    worst: float | None = None
    worst_fault: str | None = None
    for what, seconds, stuck in faults:
        value = timeout if stuck else seconds
        if value is not None and (worst is None or value > worst):
            worst, worst_fault = value, what
    stalled = [what for what, _, stall in faults if stall]
    over = [what for what, seconds, stall in faults
            if not stall and seconds is not None and seconds > bound]
    return {"worst_progress_after_fault_s": None if worst is None else round(worst, 3),
            "worst_fault": worst_fault, "progress_bound_s": bound,
            "faults_timed": sum(1 for _, seconds, stall in faults
                                if stall or seconds is not None),
            "faults_stalled": stalled, "faults_over_bound": over,
            "ok": not stalled and not over}


def build_report(opts: ChaosOptions, chaos: ChaosRecord | None,
                 baseline: JobRun | None) -> dict[str, Any]:
    """The whole report (``--json``). ``chaos`` is None when the fault-free run failed and the
    run under faults was not started."""
    kills = chaos.kills if chaos is not None else []
    accounting = chaos.accounting if chaos is not None else None
    auc = chaos.job.auc if chaos is not None else None
    auc_ff = baseline.auc if baseline is not None else None
    short = max(0, opts.kills - len(kills)) if chaos is not None else opts.kills
    outages = chaos.outages if chaos is not None else []
    oracle = chaos.oracle if chaos is not None else None
    live = liveness(faults_of(chaos) if chaos is not None else [], opts.progress_bound_s,
                    opts.recovery_timeout)
    job_outcome = _outcome(chaos.job if chaos is not None else None)
    return {
        "script": str(opts.script),
        "script_args": list(opts.script_args),
        "seed": opts.seed,
        "kills": {role: sum(1 for k in kills if k.role == role) for role in ROLES},
        "kills_total": len(kills),
        "kills_planned": opts.kills,
        "kills_short": short,
        "kills_short_reason": _short_reason(opts, len(kills)) if short and chaos else None,
        "scales_total": len(chaos.scales) if chaos is not None else 0,
        "autoscale": opts.autoscale,
        # the launcher's autoscaler's decisions (summary.json), with --autoscale
        "autoscale_decisions": list(chaos.job.summary.get("autoscale") or [])
        if chaos is not None else [],
        "store_outages": len(outages),
        "store_outages_planned": int(opts.outage > 0),
        "outages": [asdict(o) for o in outages],
        "reshards": [asdict(r) for r in chaos.reshards] if chaos is not None else [],
        "reshards_planned": list(opts.reshard),
        "schedule": opts.schedule,
        "schedule_reshards": sum("DirectedReshard" in step for step in chaos.directed)
        if chaos is not None else 0,
        "schedule_steps": list(chaos.directed) if chaos is not None else [],
        "pauses": [asdict(p) for p in chaos.pauses] if chaos is not None else [],
        "outcome": _liveness_outcome(job_outcome, live),
        "job_outcome": job_outcome,
        "worst_progress_after_fault_s": live["worst_progress_after_fault_s"],
        "worst_fault": live["worst_fault"],
        "progress_bound_s": live["progress_bound_s"],
        "liveness": live,
        "outcome_fault_free": _outcome(baseline),
        "auc": auc,
        "auc_fault_free": auc_ff,
        "auc_delta": None if auc is None or auc_ff is None else round(auc - auc_ff, 5),
        # The job's own record (the shards' applied sets, the master's task records): what the
        # mechanism under test says of itself. --oracle reads the parameters instead.
        "accounting_source": "the job's own record (the shards' applied sets and the master's "
                             "task records); for evidence from the parameters run --oracle"
                             if not opts.oracle else
                             "the job's own record; the oracle_* figures are the evidence, "
                             "read from the parameters",
        "duplicates": accounting.get("duplicates") if accounting else None,
        "missing": accounting.get("missing") if accounting else None,
        "expected_batches": accounting.get("expected_batches") if accounting else None,
        "accounting_error": chaos.accounting_error if chaos is not None else None,
        "oracle": bool(opts.oracle),
        "oracle_rows_checked": oracle.get("rows_checked") if oracle else None,
        "oracle_mismatches": oracle.get("mismatches") if oracle else None,
        "oracle_result": oracle,
        "stream": chaos.stream if chaos is not None else None,
        "stream_worst_trained_s": (chaos.stream or {}).get("worst_trained_s")
        if chaos is not None else None,
        "recovery": {role: {"serving": recovery_stats([k.serving_s for k in kills
                                                       if k.role == role]),
                            "throughput": recovery_stats([k.throughput_s for k in kills
                                                          if k.role == role])}
                     for role in ROLES} | {
            "store": {"serving": recovery_stats([o.serving_s for o in outages]),
                      "throughput": recovery_stats([o.throughput_s for o in outages])}},
        "wall_s": {"chaos": round(chaos.job.wall_s, 1) if chaos is not None else None,
                   "fault_free": round(baseline.wall_s, 1) if baseline is not None else None},
        "restarts": chaos.job.summary.get("restarts") if chaos is not None else None,
        "kill_log": [asdict(k) for k in kills],
        "scales": [asdict(s) for s in chaos.scales] if chaos is not None else [],
        "accounting": accounting,
        "output": {"chaos": str(chaos.job.output) if chaos is not None else None,
                   "fault_free": str(baseline.output) if baseline is not None else None},
    }


def _outcome(run: JobRun | None) -> str:
    if run is None:
        return "not run"
    return "succeeded" if run.succeeded else f"failed (exit {run.exit_code})"


def _liveness_outcome(job_outcome: str, live: Mapping[str, Any]) -> str:
    """The job's outcome, or, if it succeeded without staying live, why the run failed."""
    if job_outcome != "succeeded" or live["ok"]:
        return job_outcome
    if live["faults_stalled"]:
        return (f"failed (liveness: no progress within --recovery-timeout after "
                f"{', '.join(live['faults_stalled'])})")
    return (f"failed (liveness: training progressed again only "
            f"{live['worst_progress_after_fault_s']}s after {live['worst_fault']}, over the "
            f"bound of {live['progress_bound_s']:g}s)")


def _short_reason(opts: ChaosOptions, delivered: int) -> str:
    return (f"the job ended after {delivered} of {opts.kills} kills; give it more work through "
            f"the script's own arguments (more data or passes) so that {opts.kills} kills fit, "
            "or ask for fewer --kills")


def problems(report: Mapping[str, Any]) -> list[str]:
    """Why the run proved nothing or found a fault, one sentence each; empty when it passed."""
    found: list[str] = []
    if report["outcome_fault_free"].startswith("failed"):
        found.append(f"the fault-free run {report['outcome_fault_free']}, so the job was not "
                     f"run under faults; its output is in {report['output']['fault_free']}")
        return found
    if report["job_outcome"] != "succeeded":
        found.append(f"the job {report['job_outcome']} under chaos; its output is in "
                     f"{report['output']['chaos']}")
    elif report["outcome"] != "succeeded":
        live = report["liveness"]
        found.append(f"the job succeeded but did not stay live: {report['outcome']}; "
                     f"{len(live['faults_stalled'])} fault(s) stalled, "
                     f"{len(live['faults_over_bound'])} over the bound (under 'liveness')")
    if report["duplicates"] is None or report["missing"] is None:
        found.append("no exactly-once accounting could be made"
                     + (f": {report['accounting_error']}" if report["accounting_error"] else ""))
    elif report["duplicates"] or report["missing"]:
        found.append(f"exactly-once was broken by the job's own record: "
                     f"{report['duplicates']} batch application(s) beyond one and "
                     f"{report['missing']} batch(es) never applied, over "
                     f"{report['expected_batches']} expected (details under 'accounting'"
                     + ("" if report["oracle"] else "; --oracle reads the parameters") + ")")
    if report["oracle"]:
        result = report["oracle_result"] or {}
        if report["oracle_mismatches"] is None or result.get("error"):
            found.append("the oracle could not count the parameters"
                         + (f": {result['error']}" if result.get("error") else ""))
        elif report["oracle_mismatches"] or not result.get("counters_ok"):
            found.append(f"the oracle found {report['oracle_mismatches']} of "
                         f"{report['oracle_rows_checked']} rows applied other than exactly once "
                         f"(examples and per-shard counts under 'oracle_result')")
    stream = report.get("stream")
    if stream is not None and not stream["ok"]:
        found.append(f"the stream did not stay live: {stream['landed']} of "
                     f"{stream['partitions']} partitions landed, and {len(stream['over_bound'])} "
                     f"were not trained through within {stream['bound_s']:g}s of their commit "
                     f"({', '.join(stream['over_bound'][:5]) or 'none'}; under 'stream')")
    done = [r for r in report["reshards"] if r["serving_s"] is not None]
    if len(done) < len(report["reshards_planned"]) + report["schedule_reshards"]:
        found.append(f"only {len(done)} of {len(report['reshards_planned'])} planned "
                     "reshardings completed (the job ended first, or one did not finish "
                     "within --recovery-timeout)")
    if report["store_outages"] < report["store_outages_planned"]:
        found.append("the planned store outage was not delivered (the job ended first)")
    if report["autoscale"] and not report["autoscale_decisions"]:
        found.append("--autoscale: the job's autoscaler made no decision, so no trainer was "
                     "added or removed by it (give the job more work, or more --kills)")
    if report["kills_short"]:
        found.append(f"only {report['kills_total']} of {report['kills_planned']} kills were "
                     f"delivered: {report['kills_short_reason']}")
    return found


def brief(report: Mapping[str, Any]) -> dict[str, Any]:
    return {key: report[key] for key in BRIEF_KEYS}
