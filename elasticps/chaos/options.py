"""What one ``elasticps chaos`` invocation runs, validated before any process starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elasticps.config import MODES
from elasticps.errors import ConfigError
from elasticps.store.keys import MAX_PSERVERS_IN_LAYOUT

# Liveness (chaos/report.py): after each fault, training must progress again within
# 3 x the lease TTL (the dead process noticed by its lease's expiry; a standby elected or the
# slot claimed; the trainers' retries reaching the new process) plus this allowance for a
# restarted process to start and restore on a small, busy machine (python, numpy, grpc and torch
# import in about 5 s on 2 shared cores; twice that for margin).
RESTART_ALLOWANCE_S = 10.0

# A stream's liveness allows, beyond the progress bound, for the master's listing interval
# (PADDLE_STREAM_POLL_S, 2 s) and for training the partition itself (a few seconds at most for
# the oracle's small partitions on 2 busy cores).
STREAM_ALLOWANCE_S = 5.0

# How the autoscaler runs under chaos: decisions every few seconds (faults are seconds apart),
# a step up that does not lower samples/s is kept, and the CPU is not looked at (the 2 cores of
# a small test machine are always busy under chaos), so it both adds and removes trainers.
AUTOSCALE_FLAGS = ("--autoscale-cooldown", "5", "--autoscale-cpu", "0",
                   "--autoscale-min-gain", "0")

# The oracle's training script (chaos/oracle_script.py), shipped in the package: a wheel has it.
ORACLE_SCRIPT = Path(__file__).with_name("oracle_script.py")


@dataclass(frozen=True)
class ChaosOptions:
    script: Path  # the user's training script, as ``elasticps run SCRIPT`` takes it
    script_args: tuple[str, ...] = ()
    kills: int = 20
    seed: int = 1  # seeds the faults only: the script's own seeds are in its arguments
    workdir: Path = Path("chaos-run")
    trainers: int = 2
    pservers: int = 2
    scale: bool = True  # also scale trainers up and down between kills
    # The job runs under the launcher's autoscaler (between 1 and trainers + 1 trainers, with
    # AUTOSCALE_FLAGS) instead of the harness's own scale steps.
    autoscale: bool = False
    # A short lease makes every recovery fast, so many faults fit in one job.
    lease_ttl: int = 2
    # Frequent checkpoints: a restarted pserver loses seconds of pushes, not a pass.
    checkpoint_interval: float = 3.0
    # PADDLE_CHECKPOINT_DELTAS: delta checkpoints between full ones (0: full ones only)
    checkpoint_deltas: int = 0
    # Seconds after any fault within which training must progress again (None: the default
    # bound, progress_bound_s); a run whose worst case exceeds it fails.
    progress_bound: float | None = None
    gap: tuple[float, float] = (0.3, 1.5)  # seconds between a recovery and the next step
    start_timeout: float = 600.0  # job start to its first finished task
    recovery_timeout: float = 60.0  # per kill: serving again, then throughput back
    job_timeout: float = 1800.0  # each whole job run
    skip_baseline: bool = False
    # A store outage: the job runs on its own etcd, SIGKILLed after ``outage_after`` kills and
    # restarted ``outage`` seconds later on the same ports and data (0: no outage).
    outage: float = 0.0
    outage_after: int | None = None  # default: half the kills
    # The parameter-value oracle (chaos/oracle.py): its own script and data, not the user's.
    oracle: bool = False
    oracle_rows: int = 800_000
    oracle_passes: int = 3
    oracle_batch_size: int = 50
    oracle_rows_per_chunk: int = 4_000
    mode: str = "async"  # the job's training mode (elasticps run --mode)
    # Reshardings (elasticps scale --pservers): the pserver counts to move to, in order, spread
    # evenly between the kills (after kill K * i / (len + 1)).
    reshard: tuple[int, ...] = ()
    # A directed schedule (plan.SCHEDULES) carried out first, its kills counted in ``kills``.
    schedule: str | None = None
    # With the oracle: its data is a stream whose partitions land while the job runs
    # (chaos/stream_writer.py): ``stream_partitions`` of oracle_rows / stream_partitions rows,
    # one every ``stream_interval`` seconds once training is under way, then the end marker.
    stream: bool = False
    stream_partitions: int = 8
    stream_interval: float = 3.0
    # Liveness of a stream: every partition trained through within this many seconds of its
    # commit (None: progress_bound_s + STREAM_ALLOWANCE_S).
    stream_bound: float | None = None

    @property
    def stream_bound_s(self) -> float:
        """``stream_bound``, else the progress bound plus :data:`STREAM_ALLOWANCE_S`."""
        if self.stream_bound is not None:
            return self.stream_bound
        return self.progress_bound_s + STREAM_ALLOWANCE_S

    @property
    def stream_rows(self) -> int:
        """Rows of each of the stream's partitions."""
        return self.oracle_rows // self.stream_partitions

    @property
    def progress_bound_s(self) -> float:
        """The liveness bound: ``progress_bound``, else 3 x lease TTL + RESTART_ALLOWANCE_S."""
        if self.progress_bound is not None:
            return self.progress_bound
        return 3.0 * self.lease_ttl + RESTART_ALLOWANCE_S

    def reshard_at(self, index: int) -> int:
        """Kills delivered before resharding number ``index`` (0-based)."""
        return self.kills * (index + 1) // (len(self.reshard) + 1)

    @property
    def outage_at(self) -> int:
        """Kills delivered before the store outage."""
        return self.kills // 2 if self.outage_after is None else self.outage_after

    def _validate_stream(self) -> None:
        from elasticps.chaos.plan import STREAM_SCHEDULES  # plan imports targets, not options

        if self.schedule in STREAM_SCHEDULES and not self.stream:
            raise ConfigError(f"--schedule {self.schedule} needs --stream")
        if not self.stream:
            return
        if not self.oracle:
            raise ConfigError("--stream lands the oracle's partitions: it needs --oracle")
        if self.oracle_passes != 1:
            raise ConfigError(f"--oracle-passes {self.oracle_passes}: a stream is trained "
                              "once (one pass)")
        if not 1 <= self.stream_partitions <= 24 * 28:
            raise ConfigError(f"--stream-partitions {self.stream_partitions} must be in "
                              f"[1, {24 * 28}]")
        if self.stream_rows < 1:
            raise ConfigError(f"--oracle-rows {self.oracle_rows} cannot fill "
                              f"{self.stream_partitions} partitions")
        for name, seconds in (("--stream-interval", self.stream_interval),
                              ("--stream-bound", self.stream_bound_s)):
            if not seconds > 0:
                raise ConfigError(f"{name}={seconds} must be > 0 seconds")

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first option that cannot work."""
        if not self.script.is_file():
            raise ConfigError(f"script {str(self.script)!r} does not exist or is not a file")
        if self.outage < 0 or (self.outage_after is not None and self.outage_after < 0):
            raise ConfigError(f"--outage {self.outage} and --outage-after {self.outage_after} "
                              "must be >= 0")
        if self.oracle:
            for name, value in (("--oracle-rows", self.oracle_rows),
                                ("--oracle-passes", self.oracle_passes),
                                ("--oracle-batch-size", self.oracle_batch_size),
                                ("--oracle-rows-per-chunk", self.oracle_rows_per_chunk)):
                if value < 1:
                    raise ConfigError(f"{name}={value} must be >= 1")
        for name, value, low in (("--kills", self.kills, 0), ("--trainers", self.trainers, 1),
                                 ("--pservers", self.pservers, 1),
                                 ("--lease-ttl", self.lease_ttl, 1),
                                 ("--checkpoint-deltas", self.checkpoint_deltas, 0)):
            if value < low:
                raise ConfigError(f"{name}={value} must be >= {low}")
        for name, seconds in (("--checkpoint-interval", self.checkpoint_interval),
                              ("--start-timeout", self.start_timeout),
                              ("--recovery-timeout", self.recovery_timeout),
                              ("--job-timeout", self.job_timeout),
                              ("--progress-bound", self.progress_bound_s)):
            if not seconds > 0:
                raise ConfigError(f"{name}={seconds} must be > 0 seconds")
        if self.autoscale and self.scale:
            raise ConfigError("--autoscale lets the job's autoscaler scale the trainers: the "
                              "harness's own scale steps must be off (--no-scale)")
        if self.mode not in MODES:
            raise ConfigError(f"--mode={self.mode!r} is not one of {', '.join(MODES)}")
        from elasticps.chaos.plan import SCHEDULES  # plan imports targets, not options

        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule {self.schedule!r} is not one of "
                              f"{', '.join(SCHEDULES)}")
        for before, count in zip((self.pservers, *self.reshard), self.reshard, strict=False):
            if count == before:
                raise ConfigError(f"--reshard {','.join(map(str, self.reshard))}: {count} "
                                  f"pservers is no change from {before} (the job starts with "
                                  "--pservers; each count moves from the one before it)")
        for count in self.reshard:
            if not 1 <= count <= MAX_PSERVERS_IN_LAYOUT:
                raise ConfigError(f"--reshard {count}: a pserver count must be in [1, "
                                  f"{MAX_PSERVERS_IN_LAYOUT}]")
        self._validate_stream()
        if not 0 <= self.gap[0] <= self.gap[1]:
            raise ConfigError(f"--gap {self.gap[0]} {self.gap[1]} must satisfy "
                              "0 <= MIN <= MAX")
