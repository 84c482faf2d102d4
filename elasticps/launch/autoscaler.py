"""``elasticps run --autoscale``: the launcher's side of :mod:`elasticps.autoscale_policy`.

Once a second (from the launcher's loop, like :class:`~elasticps.launch.launcher.TrainerScaler`)
it gathers an :class:`~elasticps.autoscale_policy.Observation` — the master's status (backlog, live
trainers) and the job's samples/s as the launcher's watch last saw them, the machine's idle cores
from ``/proc/stat`` — and writes a decision to ``launcher/desired_trainers``, the key
``elasticps scale`` writes: the scaler then starts or retires trainers as for a person. Every
decision goes on the job's timeline with its reason, on the terminal, and into
``summary.json`` (``autoscale``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elasticps.autoscale_policy import (
    AutoscaleConfig,
    AutoscaleState,
    Decision,
    Observation,
    backlog,
    decide,
)
from elasticps.errors import ElasticPSError
from elasticps.launch.cpu_idle import IdleCores
from elasticps.launch.scale import write_desired_trainers
from elasticps.store.api import Store

log = logging.getLogger(__name__)

LatestFn = Callable[[], tuple[dict[str, Any] | None, float | None]]


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
