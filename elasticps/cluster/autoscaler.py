"""``elasticps autoscale JOB``: :mod:`elasticps.autoscale_policy` carried out on a cluster.

Every ``interval_s`` it reads, through the API server, the job's trainer count and bounds
(:mod:`~elasticps.cluster.trainer_scale`), its pods, and the master's status document (backlog,
live trainers, the job's samples/s over the master's window), and asks the pure policy what to
do. "Room for one more trainer" is what a cluster can say without a metrics server: no trainer
pod is left Pending (the scheduler placed every trainer asked for so far). A decision patches
the trainer count (Volcano task replicas or the Indexed Job), within the spec's
``min_trainers``/``max_trainers``.

It holds no state the job needs: stop it and start it again, or run it anywhere that can
reach the API server (a laptop, or a pod whose service account may read the job, its pods and
its Secret, and patch the job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from elasticps.autoscale_policy import (
    AutoscaleConfig,
    AutoscaleState,
    Decision,
    Observation,
    backlog,
    decide,
)
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.submit import JobStatus, job_status
from elasticps.cluster.trainer_scale import TrainerCount, scale_trainers, trainer_count
from elasticps.errors import ClusterError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterSettings:
    """The policy's knobs that are not the job's bounds (those come from the job)."""

    cooldown_s: float = 60.0  # a new pod is scheduled, pulls its image and registers
    up_after: int = 3
    min_gain: float = 0.15
    retry_after_s: float = 600.0


class ClusterAutoscaler:
    """One job's autoscaler; call :meth:`step` every ``interval_s`` (:meth:`run` does)."""

    def __init__(self, client: KubeClient, job: str, namespace: str,
                 settings: ClusterSettings | None = None, *,
                 say: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.job = job
        self.namespace = namespace
        self.settings = settings or ClusterSettings()
        self.say = say
        self.clock = clock
        self.state = AutoscaleState()

    def config(self, count: TrainerCount) -> AutoscaleConfig:
        s = self.settings
        return AutoscaleConfig(count.min_trainers, count.max_trainers, cooldown_s=s.cooldown_s,
                               up_after=s.up_after, min_gain=s.min_gain, cpu_per_trainer=1.0,
                               retry_after_s=s.retry_after_s)

    def observe(self, count: TrainerCount, status: JobStatus) -> Observation | None:
        """What the policy decides from; None while there is nothing to judge by."""
        doc = status.master
        if doc is None:
            return None
        left = backlog(doc)
        rate = doc.get("throughput_records_per_s")
        live = doc.get("live_trainers")
        if left is None or not isinstance(rate, int | float) or not isinstance(live, list):
            return None
        unplaced = any(p.role == "trainer" and p.phase == "Pending" for p in status.pods)
        return Observation(self.clock(), count.trainers, len(live), left, float(rate),
                           idle_cores=0.0 if unplaced else 1.0)

    def step(self, status: JobStatus | None = None) -> Decision | None:
        """Observe once (``status`` if just read) and carry out what the policy decides; the
        decision, if any."""
        count = trainer_count(self.client, self.job, self.namespace)
        status = status or job_status(self.client, self.job, self.namespace)
        obs = self.observe(count, status)
        if obs is None:
            return None
        self.state, decision = decide(self.config(count), self.state, obs)
        if decision is None or decision.target == obs.desired:
            return None
        scale_trainers(self.client, self.job, self.namespace, decision.target)
        self.say(f"elasticps autoscale: job {self.job}: {obs.desired} -> {decision.target} "
                 f"trainers ({decision.reason})")
        return decision

    def run(self, interval_s: float, stop: threading.Event | None = None) -> str:
        """Step every ``interval_s`` until the job finishes (its final phase) or ``stop`` is
        set ("stopped"); Ctrl-C ends it too."""
        stop = stop or threading.Event()
        while True:
            try:
                status = job_status(self.client, self.job, self.namespace)
                if status.finished:
                    return status.phase
                self.step(status)
            except ClusterError as exc:  # the API server or the master is away: try again
                log.warning("elasticps autoscale: job %s: %s", self.job, exc)
            if stop.wait(interval_s):
                return "stopped"
