"""The local launcher: ``elasticps run`` supervises a whole job on one machine."""

from elasticps.launch.launcher import Launch, LaunchOptions, run_job
from elasticps.launch.supervisor import JobState, Supervisor

__all__ = ["JobState", "Launch", "LaunchOptions", "Supervisor", "run_job"]
