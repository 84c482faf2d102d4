"""When ``elasticps run`` starts its hot-standby masters: once the job trains.

A job's start is CPU-bound on a small machine: every role imports its libraries at once, and a
standby (a whole master process, a third of a second of CPU) competes with the trainers for the
cores while they load torch. Until a trainer has trained its first batch (its progress key,
``job/progress/<trainer>``) or one lease TTL (``PADDLE_LEASE_TTL``, ``bound_s``) has passed,
the standbys wait; then they all start and campaign. Nothing is given up meanwhile: a leader
that dies before then is restarted by the supervisor at once, and the new process campaigns as a
standby would, taking over when the dead leader's election lease expires (the lease TTL bounds
a takeover either way; the bound keeps the standby's head start for a script that spends its
first seconds elsewhere, loading data, or never trains at all).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from elasticps.errors import ElasticPSError
from elasticps.launch.process import RoleSpec
from elasticps.launch.supervisor import JobState, Supervisor
from elasticps.store.api import Store
from elasticps.store.keys import PROGRESS_PREFIX

log = logging.getLogger(__name__)

# The standbys start at the latest this long after the job when nothing says otherwise (the
# launcher passes the job's lease TTL, of which this is the default).
STANDBY_BOUND_S = 5.0


def standbys_due(trained: bool, elapsed_s: float, bound_s: float = STANDBY_BOUND_S) -> bool:
    """Whether the deferred standbys start now (pure)."""
    return trained or elapsed_s >= bound_s


class DeferredStandbys:
    """The standby masters of a launched job, started by :meth:`step` once they are due."""

    def __init__(self, specs: list[RoleSpec], supervisor: Supervisor,
                 store: Callable[[], Store], *, job_name: str,
                 bound_s: float = STANDBY_BOUND_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pending = list(specs)
        self.supervisor = supervisor
        self.store = store
        self.job_name = job_name
        self.bound_s = bound_s
        self.clock = clock
        self.started_at = clock()

    def step(self) -> None:
        if not self.pending or self.supervisor.state is not JobState.RUNNING:
            return
        if not standbys_due(self._trained(), self.clock() - self.started_at, self.bound_s):
            return
        for spec in self.pending:
            self.supervisor.add(spec, announce=False)
        log.info("Job %s: started %d standby master(s).", self.job_name, len(self.pending))
        self.pending = []

    def _trained(self) -> bool:
        try:
            return bool(self.store().get_prefix(PROGRESS_PREFIX))
        except ElasticPSError as exc:  # the store is the job's; it may be briefly busy
            log.debug("Job %s: cannot read %s (%s).", self.job_name, PROGRESS_PREFIX, exc)
            return False
