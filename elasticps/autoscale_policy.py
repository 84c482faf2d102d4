"""When to add or remove a trainer: a pure policy over what the job and its machines report.

:func:`decide` takes the policy's memory (:class:`AutoscaleState`) and one
:class:`Observation` and returns the next memory and, maybe, a :class:`Decision`. Nothing here
reads a clock, a store, ``/proc`` or an API server: the launcher's
:mod:`~elasticps.launch.autoscaler` (one machine) and :mod:`~elasticps.cluster.autoscaler` (a
cluster, through the API server) gather the observation and carry the decision out, so every
rule is tested over scripted load. The same rules run in both places; on a cluster "idle
cores" is whether the last trainer added found room (no trainer pod left Pending).

The rules, first match wins:

1. **Bounds**: a desired count outside ``[min_trainers, max_trainers]`` is brought inside.
2. **Work runs out**: with fewer tasks left (this pass and the passes to come) than trainers,
   the extra trainers can only wait, so the job shrinks to the backlog (never below min).
3. **A change in flight**: until the live trainers match the desired count (a new trainer
   imports torch and registers; a leaving one hands its task back), nothing is judged.
4. **Cooldown**: for ``cooldown_s`` after a change, and after the first observation (a job's
   first seconds, its imports and first pulls, run slower than its steady rate), nothing else
   changes (hysteresis).
5. **Judge the last step up**: it must have raised the job's samples/s by ``min_gain``; if not
   (the machine was already full, or the pservers are the bottleneck), it is undone and the
   count it reached becomes a ceiling for ``retry_after_s``.
6. **Grow**: when a new trainer would get work (backlog above the count), the machine has
   ``cpu_per_trainer`` idle cores for it, and the count is below max and any learnt ceiling,
   for ``up_after`` observations in a row, add one trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from elasticps.errors import ConfigError


@dataclass(frozen=True)
class AutoscaleConfig:
    min_trainers: int
    max_trainers: int
    cooldown_s: float = 30.0  # after a change: long enough for the new trainer to show its rate
    up_after: int = 3  # consecutive observations that ask for one more trainer
    min_gain: float = 0.15  # a step up must raise the job's samples/s by this fraction
    cpu_per_trainer: float = 1.0  # idle cores a new trainer needs (0: do not look at the CPU)
    retry_after_s: float = 300.0  # a ceiling learnt from a step that did not pay expires

    def __post_init__(self) -> None:
        if self.min_trainers < 1:
            raise ConfigError(f"--min-trainers={self.min_trainers} must be >= 1")
        if self.max_trainers < self.min_trainers:
            raise ConfigError(f"--max-trainers={self.max_trainers} must be >= --min-trainers="
                              f"{self.min_trainers}")
        if self.cooldown_s < 0 or self.up_after < 1 or self.min_gain < 0 or (
                self.cpu_per_trainer < 0 or self.retry_after_s < 0):
            raise ConfigError(f"autoscale settings out of range: {self}")


@dataclass(frozen=True)
class Observation:
    time: float  # seconds, any monotonic origin
    desired: int  # the trainer count the launcher is asked for now
    live: int  # trainers the master sees alive
    backlog: int  # tasks not done: todo and pending of this pass, plus the passes to come
    samples_per_s: float  # the whole job's rate over the last few seconds
    idle_cores: float  # the machine's idle CPU, in cores


@dataclass(frozen=True)
class AutoscaleState:
    changed_at: float | None = None  # when the last decision was made
    rate_before_up: float | None = None  # samples/s before the last step up, until judged
    want_up: int = 0  # consecutive observations that asked for more
    ceiling: int | None = None  # a count that did not pay, and when it was learnt
    ceiling_at: float = 0.0


@dataclass(frozen=True)
class Decision:
    target: int
    reason: str


def decide(cfg: AutoscaleConfig, state: AutoscaleState,
           obs: Observation) -> tuple[AutoscaleState, Decision | None]:
    """The next state, and a new trainer count with its reason (None: keep the count)."""
    if state.changed_at is None:
        state = replace(state, changed_at=obs.time)
    changed = replace(state, changed_at=obs.time, want_up=0)
    if not cfg.min_trainers <= obs.desired <= cfg.max_trainers:
        target = min(max(obs.desired, cfg.min_trainers), cfg.max_trainers)
        return replace(changed, rate_before_up=None), Decision(
            target, f"{obs.desired} is outside [{cfg.min_trainers}, {cfg.max_trainers}]")
    if obs.backlog < obs.desired and obs.desired > cfg.min_trainers:
        target = max(cfg.min_trainers, obs.backlog)
        return replace(changed, rate_before_up=None), Decision(
            target, f"only {obs.backlog} task(s) left for {obs.desired} trainers")
    if obs.live != obs.desired:
        return replace(state, want_up=0), None
    if state.changed_at is not None and obs.time - state.changed_at < cfg.cooldown_s:
        return state, None
    if state.rate_before_up is not None:
        before, now = state.rate_before_up, obs.samples_per_s
        if now < before * (1 + cfg.min_gain) and obs.desired > cfg.min_trainers:
            return replace(changed, rate_before_up=None, ceiling=obs.desired - 1,
                           ceiling_at=obs.time), Decision(
                obs.desired - 1, f"the step to {obs.desired} trainers did not pay: "
                f"{before:,.0f} -> {now:,.0f} samples/s (needs +{cfg.min_gain:.0%})")
        state = replace(state, rate_before_up=None)  # it paid
    if state.ceiling is not None and obs.time - state.ceiling_at >= cfg.retry_after_s:
        state = replace(state, ceiling=None)
    room = min(cfg.max_trainers, cfg.max_trainers if state.ceiling is None else state.ceiling)
    wants_more = (obs.desired < room and obs.backlog > obs.desired
                  and obs.idle_cores >= cfg.cpu_per_trainer)
    if not wants_more:
        return replace(state, want_up=0), None
    if state.want_up + 1 < cfg.up_after:
        return replace(state, want_up=state.want_up + 1), None
    return replace(changed, rate_before_up=obs.samples_per_s), Decision(
        obs.desired + 1, f"{obs.backlog} tasks left, {obs.idle_cores:.1f} idle cores, "
        f"{obs.samples_per_s / max(obs.live, 1):,.0f} samples/s per trainer")


def backlog(status: Mapping[str, Any]) -> int | None:
    """Tasks not done yet, this pass and the passes to come, from the master's status
    document; None while the master has no dataset or the job is over."""
    tasks, passes, pass_id = (_count(status.get(k)) for k in ("num_tasks", "num_passes", "pass"))
    counts = status.get("counts")
    if status.get("state") != "running" or not isinstance(counts, dict) or (
            tasks is None or passes is None or pass_id is None):
        return None
    this_pass = (_count(counts.get("todo", 0)) or 0) + (_count(counts.get("pending", 0)) or 0)
    return this_pass + max(0, passes - pass_id - 1) * tasks


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
