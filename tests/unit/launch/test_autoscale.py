"""The autoscaling policy over scripted load, and the launcher's side of it on a real store."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticps.autoscale_policy import (
    AutoscaleConfig,
    AutoscaleState,
    Observation,
    backlog,
    decide,
)
from elasticps.errors import ConfigError
from elasticps.launch.autoscaler import Autoscaler
from elasticps.launch.cpu_idle import IdleCores, parse_cpu_line
from elasticps.store import Store, open_store
from elasticps.store.keys import DESIRED_TRAINERS, decode_desired_trainers, read_events

CFG = AutoscaleConfig(min_trainers=1, max_trainers=4, cooldown_s=10.0, up_after=3,
                      min_gain=0.15, cpu_per_trainer=1.0, retry_after_s=100.0)


def run(cfg: AutoscaleConfig, script: list[Observation],
        per_trainer: float | None = None) -> list[tuple[float, int, str]]:
    """Feed observations in order, applying each decision to the next observation's desired
    count (as the launcher does) and returning (time, target, reason) per decision. With
    ``per_trainer``, the job's rate is that times the trainers (each one pays in full)."""
    state, desired, out = AutoscaleState(), script[0].desired, []
    for obs in script:
        rate = obs.samples_per_s if per_trainer is None else per_trainer * desired
        obs = Observation(obs.time, desired, min(obs.live, desired), obs.backlog, rate,
                          obs.idle_cores)
        state, decision = decide(cfg, state, obs)
        if decision is not None:
            out.append((obs.time, decision.target, decision.reason))
            desired = decision.target
    return out


def load(t0: int, t1: int, *, backlog: int = 100, rate: float = 1000.0, idle: float = 2.0,
         live: int = 99) -> list[Observation]:
    """One observation a second; ``live`` is capped at the desired count by :func:`run`."""
    return [Observation(float(t), 0, live, backlog, rate, idle) for t in range(t0, t1)]


def test_it_grows_one_trainer_at_a_time_after_sustained_demand_and_a_cooldown() -> None:
    script = load(0, 50)
    script[0] = Observation(0.0, 1, 1, 100, 1000.0, 2.0)
    steps = run(CFG, script, per_trainer=1000.0)  # every step pays
    # the first look starts a 10 s cooldown (a job starts slower than its steady rate), then
    # 3 observations asking; each step is judged (it paid) after its own cooldown before the
    # next 3 observations count: nothing counts towards a step while the last one settles
    assert [(t, n) for t, n, _ in steps] == [(12.0, 2), (24.0, 3), (36.0, 4)]
    assert "100 tasks left, 2.0 idle cores" in steps[0][2]


def test_a_step_that_does_not_raise_throughput_is_undone_and_not_retried_for_a_while() -> None:
    flat = load(0, 140, rate=1000.0)
    flat[0] = Observation(0.0, 1, 1, 100, 1000.0, 2.0)
    steps = run(CFG, flat)
    assert [(t, n) for t, n, _ in steps[:2]] == [(12.0, 2), (22.0, 1)]
    assert "did not pay: 1,000 -> 1,000 samples/s" in steps[1][2]
    # the ceiling (1) holds for retry_after_s = 100 s after it was learnt at t=22
    assert all(t >= 122.0 for t, _, _ in steps[2:]), steps
    assert steps[2][1] == 2


def test_no_growth_without_an_idle_core_or_without_work_for_another_trainer() -> None:
    busy = load(0, 30, idle=0.4)
    busy[0] = Observation(0.0, 1, 1, 100, 1000.0, 0.4)
    assert run(CFG, busy) == []
    starving = load(0, 30, backlog=1)
    starving[0] = Observation(0.0, 1, 1, 1, 1000.0, 2.0)
    assert run(CFG, starving) == []
    # the CPU check can be turned off (trainers that wait on I/O)
    io_bound = AutoscaleConfig(1, 2, cooldown_s=10.0, cpu_per_trainer=0.0)
    # (and, with a flat rate, the step is undone once judged)
    assert [(t, n) for t, n, _ in run(io_bound, busy)] == [(12.0, 2), (22.0, 1)]


def test_it_shrinks_to_the_backlog_at_once_but_never_below_min() -> None:
    cfg = AutoscaleConfig(min_trainers=2, max_trainers=6, cooldown_s=10.0)
    tail = [Observation(0.0, 5, 5, 40, 1000.0, 0.0), Observation(1.0, 5, 5, 3, 1000.0, 0.0),
            Observation(2.0, 5, 5, 1, 1000.0, 0.0), Observation(3.0, 5, 5, 0, 1000.0, 0.0)]
    steps = run(cfg, tail)
    assert [(t, n) for t, n, _ in steps] == [(1.0, 3), (2.0, 2)]
    assert steps[0][2] == "only 3 task(s) left for 5 trainers"


def test_a_count_outside_the_bounds_is_brought_inside_and_a_change_in_flight_is_not_judged(
        ) -> None:
    assert [n for _, n, _ in run(CFG, [Observation(0.0, 7, 7, 100, 1.0, 0.0)])] == [4]
    # a trainer still starting (live < desired): no judgement, no growth streak
    state = AutoscaleState()
    for t in range(10):
        state, decision = decide(CFG, state, Observation(float(t), 2, 1, 100, 1.0, 4.0))
        assert decision is None
    assert state.want_up == 0


def test_bad_bounds_are_refused_with_the_flag_named() -> None:
    with pytest.raises(ConfigError, match="--max-trainers=1 must be >= --min-trainers=2"):
        AutoscaleConfig(2, 1)
    with pytest.raises(ConfigError, match="--min-trainers=0"):
        AutoscaleConfig(0, 3)


def test_backlog_counts_this_pass_and_the_passes_to_come() -> None:
    status = {"state": "running", "pass": 1, "num_passes": 3, "num_tasks": 10,
              "counts": {"todo": 4, "pending": 2, "done": 4, "failed": 0}}
    assert backlog(status) == 6 + 10
    assert backlog({**status, "state": "succeeded"}) is None
    assert backlog({"state": "waiting_for_dataset", "pass": None}) is None
    assert backlog({**status, "num_tasks": True}) is None


def test_idle_cores_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    #                  user nice system idle iowait irq softirq steal
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\nintr 5\n")
    assert parse_cpu_line(stat.read_text()) == (800, 1000)
    idle = IdleCores(stat, cores=4)
    idle.sample()
    stat.write_text("cpu  400 0 100 800 100 0 0 0 0 0\n")  # 300 busy, 100 idle jiffies
    assert idle.sample() == pytest.approx(4 * 100 / 400)
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_cpu_line("intr 5\n")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    handle = open_store(f"file://{tmp_path}/job.db", "autoscale-test")
    yield handle
    handle.close()


class FixedIdle(IdleCores):
    def __init__(self, cores: float) -> None:
        self.cores_idle = cores

    def sample(self) -> float:
        return self.cores_idle


def test_the_autoscaler_writes_its_decision_where_elasticps_scale_does(store: Store) -> None:
    status = {"state": "running", "pass": 0, "num_passes": 1, "num_tasks": 50,
              "counts": {"todo": 40, "pending": 1}, "live_trainers": ["t-1"]}
    clock = iter(float(t) for t in range(100))
    said: list[str] = []
    scaler = Autoscaler(AutoscaleConfig(1, 3, cooldown_s=0.0, up_after=2),
                        lambda: (status, 900.0), lambda: store, said.append,
                        idle=FixedIdle(1.5), clock=lambda: next(clock))
    assert scaler.step(1) is None  # one observation asking for more: not yet
    decision = scaler.step(1)
    assert decision is not None
    assert decision.target == 2
    written = store.get(DESIRED_TRAINERS)
    assert written is not None
    assert decode_desired_trainers(written.value) == 2
    assert [r.trainers_to for r in scaler.records] == [2]
    assert said == [f"elasticps run: autoscaler: 1 -> 2 trainers ({decision.reason})"]
    event = read_events(store)[-1]
    assert (event.kind, event.source) == ("scale", "autoscaler")
    assert decision.reason in event.message
    # no master status yet (or the job is over): nothing is decided
    status = {"state": "succeeded"}
    assert scaler.step(2) is None


def test_bounds_without_autoscale_are_refused_and_max_defaults_to_the_cores() -> None:
    from elasticps.launch.cli import _autoscale

    def args(**given: object) -> argparse.Namespace:
        base = {"autoscale": False, "min_trainers": 1, "max_trainers": None, "trainers": 1,
                "autoscale_cooldown": 30.0, "autoscale_cpu": 1.0, "autoscale_min_gain": 0.15}
        return argparse.Namespace(**{**base, **given})

    with pytest.raises(ConfigError, match="--max-trainers=3 needs --autoscale"):
        _autoscale(args(max_trainers=3))
    assert _autoscale(args()) is None
    cfg = _autoscale(args(autoscale=True, trainers=2))
    assert cfg is not None
    assert cfg.max_trainers == max(2, os.cpu_count() or 1)
