"""``elasticps run --autoscale``: the launcher's side of :mod:`.autoscale_policy`.

Once a second (from the launcher's loop, like :class:`~elasticps.launch.launcher.TrainerScaler`)
it gathers an :class:`~.autoscale_policy.Observation` — the master's status (backlog, live
trainers) and the job's samples/s as the status monitor last saw them, the machine's idle cores
from ``/proc/stat`` — and writes a decision to ``launcher/desired_trainers``, the key
``elasticps scale`` writes: the scaler then starts or retires trainers as for a person. Every
decision goes on the job's timeline with its reason, on the terminal, and into
``summary.json`` (``autoscale``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from elasticps.errors import ElasticPSError
from elasticps.launch.autoscale_policy import (
    AutoscaleConfig,
    AutoscaleState,
    Decision,
    Observation,
    decide,
)
from elasticps.launch.cpu_idle import IdleCores
from elasticps.launch.scale import write_desired_trainers
from elasticps.store.api import Store

log = logging.getLogger(__name__)

LatestFn = Callable[[], tuple[dict[str, Any] | None, float | None]]


def backlog(status: Mapping[str, Any]) -> int | None:
    """Tasks not done yet, this pass and the passes to come; None while the master has no
    dataset or the job is over."""
    tasks, passes, pass_id = (_count(status.get(k)) for k in ("num_tasks", "num_passes", "pass"))
    counts = status.get("counts")
    if status.get("state") != "running" or not isinstance(counts, dict) or (
            tasks is None or passes is None or pass_id is None):
        return None
    this_pass = (_count(counts.get("todo", 0)) or 0) + (_count(counts.get("pending", 0)) or 0)
    return this_pass + max(0, passes - pass_id - 1) * tasks


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class AutoscaleRecord:
    """One decision, as summary.json keeps it."""

    elapsed_s: float
    trainers_from: int
    trainers_to: int
    reason: str


class Autoscaler:
    def __init__(self, cfg: AutoscaleConfig, latest: LatestFn, store: Callable[[], Store],
                 say: Callable[[str], None], *, interval_s: float = 1.0,
                 idle: IdleCores | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.latest = latest
        self.store = store
        self.say = say
        self.interval_s = interval_s
        self.idle = idle or IdleCores()
        self.clock = clock
        self.state = AutoscaleState()
        self.records: list[AutoscaleRecord] = []
        self._started = clock()
        self._next = 0.0
        self.idle.sample()  # the first sample measures since boot: start the interval now

    def step(self, desired: int) -> Decision | None:
        """Observe and maybe decide; ``desired`` is the count the launcher follows now."""
        now = self.clock()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        idle_cores = self.idle.sample()
        status, rate = self.latest()
        left = backlog(status) if status is not None else None
        live = status.get("live_trainers") if status is not None else None
        if left is None or rate is None or not isinstance(live, list):
            return None  # nothing to judge by yet (or any more)
        obs = Observation(now, desired, len(live), left, rate, idle_cores)
        self.state, decision = decide(self.cfg, self.state, obs)
        if decision is None or decision.target == obs.desired:
            return None
        try:
            write_desired_trainers(self.store(), decision.target, "autoscaler", decision.reason)
        except ElasticPSError as exc:  # the store is away: decide again next time
            log.warning("Autoscaler could not ask for %d trainers: %s", decision.target, exc)
            return None
        self.records.append(AutoscaleRecord(round(now - self._started, 1), obs.desired,
                                            decision.target, decision.reason))
        self.say(f"elasticps run: autoscaler: {obs.desired} -> {decision.target} trainers "
                 f"({decision.reason})")
        return decision
