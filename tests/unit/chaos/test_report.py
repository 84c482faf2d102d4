"""The report counts what was done, and says why a run proved nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from elasticps.chaos.options import ChaosOptions
from elasticps.chaos.report import (
    ChaosRecord,
    JobRun,
    KillRecord,
    ScaleRecord,
    brief,
    build_report,
    problems,
    recovery_stats,
)

OPTS = ChaosOptions(script=Path("train.py"), script_args=("--rows", "10"), kills=3, seed=4)
CLEAN = {"passes": [{"pass": 0, "complete": True, "shards": []}], "expected_batches": 40,
         "duplicates": 0, "missing": 0}


def run(code: int = 0, auc: object = None, wall: float = 10.0) -> JobRun:
    summary = {"restarts": {"pserver 0": 1}} | ({} if auc is None else {"auc": auc})
    return JobRun(code, wall, Path("w"), Path("w.out"), summary)


def record(kills: int = 3, code: int = 0, accounting: dict | None = None) -> ChaosRecord:
    log = [KillRecord("master", 10, "m", 1.0, 2.0, 3.0),
           KillRecord("pserver", 11, "0", 2.0, 1.0, None),
           KillRecord("pserver", 12, "1", 3.0, 3.0, 4.0)][:kills]
    return ChaosRecord(run(code, auc=0.75), log, [ScaleRecord(1.5, 3)],
                       CLEAN if accounting is None else accounting)


def test_a_clean_run_reports_kills_recoveries_and_the_auc_against_the_baseline() -> None:
    report = build_report(OPTS, record(), run(auc=0.7512, wall=6.04))
    assert report["kills"] == {"master": 1, "pserver": 2, "trainer": 0}
    assert (report["kills_total"], report["kills_planned"], report["kills_short"]) == (3, 3, 0)
    assert report["scales_total"] == 1
    assert report["outcome"] == report["outcome_fault_free"] == "succeeded"
    assert report["auc_delta"] == round(0.75 - 0.7512, 5)
    assert (report["duplicates"], report["missing"], report["expected_batches"]) == (0, 0, 40)
    assert report["recovery"]["pserver"]["serving"] == {"n": 2, "recovered": 2,
                                                        "median_s": 2.0, "max_s": 3.0}
    assert report["recovery"]["pserver"]["throughput"]["recovered"] == 1
    assert report["recovery"]["trainer"]["serving"]["median_s"] is None
    assert report["wall_s"] == {"chaos": 10.0, "fault_free": 6.0}
    assert report["restarts"] == {"pserver 0": 1}
    assert report["script_args"] == ["--rows", "10"]
    assert problems(report) == []
    assert set(brief(report)) < set(report)


def test_a_script_without_an_auc_or_a_skipped_baseline_leaves_the_auc_fields_empty() -> None:
    report = build_report(OPTS, record(), None)
    assert (report["auc_fault_free"], report["auc_delta"]) == (None, None)
    assert report["outcome_fault_free"] == "not run"
    assert problems(report) == []
    assert build_report(OPTS, record(), run(auc=True))["auc_fault_free"] is None


def test_an_autoscaled_run_reports_the_decisions_and_fails_without_any() -> None:
    opts = replace(OPTS, autoscale=True, scale=False)
    decided = record()
    decided.job.summary["autoscale"] = [
        {"elapsed_s": 12.0, "trainers_from": 2, "trainers_to": 3, "reason": "backlog"}]
    report = build_report(opts, decided, None)
    assert [d["trainers_to"] for d in report["autoscale_decisions"]] == [3]
    assert problems(report) == []
    [problem] = problems(build_report(opts, record(), None))
    assert "autoscaler made no decision" in problem
    assert problems(build_report(OPTS, record(), None)) == []  # without --autoscale: no check


def test_too_few_kills_tells_the_user_to_give_the_job_more_work() -> None:
    report = build_report(OPTS, record(kills=1), None)
    assert report["kills_short"] == 2
    [problem] = problems(report)
    assert "only 1 of 3 kills" in problem
    assert "more work" in problem


def test_a_failed_job_broken_accounting_or_none_at_all_are_problems() -> None:
    failed = build_report(OPTS, record(code=1), None)
    assert failed["outcome"] == "failed (exit 1)"
    assert any("failed (exit 1) under chaos" in p for p in problems(failed))
    broken = build_report(OPTS, record(accounting={**CLEAN, "duplicates": 2, "missing": 1}), None)
    assert any("2 batch application(s) beyond one and 1 batch(es) never applied" in p
               for p in problems(broken))
    chaos = record()
    chaos.accounting, chaos.accounting_error = None, "CheckpointError: corrupt"
    none = build_report(OPTS, chaos, None)
    assert none["duplicates"] is None
    assert problems(none) == ["no exactly-once accounting could be made: CheckpointError: "
                              "corrupt"]


def test_a_failed_baseline_stops_before_the_faults() -> None:
    report = build_report(OPTS, None, run(code=2))
    assert report["outcome"] == "not run"
    assert report["kills_total"] == 0
    [problem] = problems(report)
    assert "fault-free run failed (exit 2)" in problem
    assert "w.out" in problem


def test_recovery_stats_count_what_never_recovered() -> None:
    assert recovery_stats([1.0, None, 3.0, 2.0]) == {"n": 4, "recovered": 3, "median_s": 2.0,
                                                     "max_s": 3.0}
    assert recovery_stats([]) == {"n": 0, "recovered": 0, "median_s": None, "max_s": None}


def test_liveness_takes_the_worst_fault_and_fails_over_the_bound_or_on_a_stall() -> None:
    from elasticps.chaos.report import ReshardRecord, faults_of, liveness

    chaos = record()  # kills: progress after 3.0 s, never (the job ended), 4.0 s
    chaos.scales = [ScaleRecord(1.5, 3, 0.5, 2.5)]
    chaos.reshards = [ReshardRecord(2.5, 3, "1", 6.0, 9.0)]
    faults = faults_of(chaos)
    assert [f[0] for f in faults] == ["kill 1 (master m)", "scale to 3 trainers",
                                      "kill 2 (pserver 0)", "reshard to 3 pservers",
                                      "kill 3 (pserver 1)"]
    ok = liveness(faults, bound=16.0, timeout=60.0)
    assert (ok["ok"], ok["worst_progress_after_fault_s"], ok["worst_fault"],
            ok["faults_timed"]) == (True, 9.0, "reshard to 3 pservers", 4)
    over = liveness(faults, bound=8.0, timeout=60.0)
    assert (over["ok"], over["faults_over_bound"]) == (False, ["reshard to 3 pservers"])
    chaos.kills[1].stalled = True  # no progress within the recovery timeout, the job running
    stalled = liveness(faults_of(chaos), bound=16.0, timeout=60.0)
    assert (stalled["ok"], stalled["worst_progress_after_fault_s"], stalled["faults_stalled"]) \
        == (False, 60.0, ["kill 2 (pserver 0)"])
    assert liveness([], 16.0, 60.0)["ok"]


def test_a_job_that_succeeded_but_stalled_after_a_fault_fails_the_run() -> None:
    chaos = record()
    report = build_report(OPTS, chaos, None)
    assert (report["outcome"], report["progress_bound_s"]) == ("succeeded", 16.0)
    assert report["worst_progress_after_fault_s"] == 4.0
    chaos.kills[2].throughput_s = 17.5
    report = build_report(OPTS, chaos, None)
    assert report["job_outcome"] == "succeeded"
    assert report["outcome"] == ("failed (liveness: training progressed again only 17.5s after "
                                 "kill 3 (pserver 1), over the bound of 16s)")
    assert any("did not stay live" in p for p in problems(report))
    chaos.kills[1].stalled = True
    report = build_report(OPTS, chaos, None)
    assert "no progress within --recovery-timeout after kill 2" in report["outcome"]


def test_the_plain_report_says_its_duplicates_and_missing_are_the_jobs_own_record() -> None:
    broken = CLEAN | {"duplicates": 2, "missing": 1}
    report = build_report(OPTS, record(accounting=broken), None)
    assert "job's own record" in report["accounting_source"]
    assert "--oracle" in report["accounting_source"]
    assert "accounting_source" in brief(report)
    (problem,) = problems(report)
    assert "by the job's own record" in problem
    assert "--oracle reads the parameters" in problem
    oracle = build_report(replace(OPTS, oracle=True), record(), None)
    assert "oracle_* figures are the evidence" in oracle["accounting_source"]
