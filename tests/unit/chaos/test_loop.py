"""The chaos loop stepped against a simulated job: the seed's kills, delivered only to this
host's processes, each once, a leader only while a standby waits; scale steps waited for."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from elasticps.chaos.job_watch import progress_of
from elasticps.chaos.loop import ChaosLoop
from elasticps.chaos.options import ChaosOptions
from elasticps.chaos.plan import KillRole, Planner, ScaleTrainers, preview
from elasticps.chaos.targets import PublishedProcesses
from elasticps.store.keys import MasterAddress, ProcessInfo, PServerSlot, TrainerRegistration

HERE, THERE = "node-a", "node-b"


class SimJob:
    """A job whose processes publish records like a real one; a killed process is replaced at
    once by a new one (a new pid), and its own record lingers, as it does until its lease ends."""

    output = Path("chaos.out")

    def __init__(self, *, standby: bool = True) -> None:
        self.started = time.monotonic()
        self.running = True
        self._pid = 100
        self.leader = MasterAddress("g:1", "h:2", "master-a-1", 1, HERE)
        self.candidates = {"master-a-1": ProcessInfo(1, HERE)}
        if standby:
            self.candidates["master-a-2"] = ProcessInfo(2, HERE)
        # slot 1 runs on another machine of the same job: never ours to signal
        self.slots = {0: PServerSlot("s:0", 10, HERE), 1: PServerSlot("s:1", 11, THERE)}
        self.trainers = {"t-20": TrainerRegistration(20, HERE),
                         "t-21": TrainerRegistration(21, HERE),
                         "t-22": TrainerRegistration(22, THERE)}
        self.tasks = 1
        self.done_after: int | None = None  # the master says done after this many kills
        self.killed: list[int] = []
        self.leaders_killed_with_a_standby: list[bool] = []

    # -- what the loop reads ---------------------------------------------------------------

    def pause(self, seconds: float) -> None:
        pass

    def processes(self) -> PublishedProcesses:
        return PublishedProcesses(self.leader, dict(self.candidates), dict(self.slots),
                                  dict(self.trainers))

    def status(self, procs: PublishedProcesses | None = None) -> dict[str, Any]:
        return {"counts": {}, "tasks_finished_total": self.tasks, "recoveries_total": 0,
                "done": self.done_after is not None and len(self.killed) >= self.done_after}

    def progress(self) -> int | None:
        return progress_of(self.status())

    def progress_marks(self) -> dict[str, int] | None:
        progress = self.progress()
        return None if progress is None else {"master": progress}

    # -- what the loop does ----------------------------------------------------------------

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        self._pid += 1
        new = self._pid
        if pid == self.leader.pid:
            standbys = [n for n, p in self.candidates.items()
                        if n != self.leader.node and p.pid not in self.killed]
            self.leaders_killed_with_a_standby.append(bool(standbys))
            self.leader = replace(self.leader, node=standbys[0],
                                  pid=self.candidates[standbys[0]].pid)
            self.candidates[f"master-a-{new}"] = ProcessInfo(new, HERE)  # the restarted one
        elif pid in {s.pid for s in self.slots.values()}:
            slot = next(i for i, s in self.slots.items() if s.pid == pid)
            self.slots[slot] = PServerSlot(f"s:{slot}", new, HERE)
        else:
            self.trainers[f"t-{new}"] = TrainerRegistration(new, HERE)
        self.tasks += 1

    def scale_to(self, count: int) -> None:
        live = [n for n, r in self.trainers.items() if not r.leaving and r.pid not in self.killed]
        for name in live[count:]:
            self.trainers[name] = replace(self.trainers[name], leaving=True)
        for _ in range(count - len(live)):
            self._pid += 1
            self.trainers[f"t-{self._pid}"] = TrainerRegistration(self._pid, HERE)
        self.tasks += 1  # training goes on


def loop_for(job: SimJob, seed: int, kills: int, *, scale: bool = False,
             recovery_timeout: float = 5.0) -> tuple[ChaosLoop, list[str]]:
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=kills, seed=seed, scale=scale,
                        gap=(0.0, 0.0), recovery_timeout=recovery_timeout)
    planner = Planner(seed, opts.trainers, scale=scale, gap=opts.gap)
    loop = ChaosLoop(opts, job, job, planner, job.scale_to, said.append, host=HERE,
                     kill=job.kill)
    job.done_after = kills  # the job ends with its last kill (run() watches it to the end)
    return loop, said


def test_the_seeds_kills_reach_only_this_hosts_processes_each_once() -> None:
    job = SimJob()
    loop, said = loop_for(job, seed=7, kills=20)
    loop.run(deadline=time.monotonic() + 5)
    assert [k.role for k in loop.kills] == [
        s.role for s in preview(7, 20, 2, scale=False) if isinstance(s, KillRole)]
    assert job.killed == [k.pid for k in loop.kills]
    assert len(set(job.killed)) == len(job.killed)  # lingering records are never hit again
    assert not {11, 22} & set(job.killed)  # slot 1 and trainer t-22 live on another host
    assert all(job.leaders_killed_with_a_standby)
    assert all(k.serving_s is not None and k.throughput_s is not None for k in loop.kills)
    assert len(said) == 20
    assert loop.finished()


def test_a_leader_is_not_killed_while_no_standby_waits() -> None:
    job = SimJob(standby=False)
    assert preview(2, 1, 2, scale=False) == [KillRole("master")]
    loop, said = loop_for(job, seed=2, kills=1, recovery_timeout=0.3)
    loop.step()
    assert job.killed == []
    assert loop.kills == []
    assert "no standby master joined the election" in said[0]


def test_a_scale_step_is_carried_out_and_waited_for() -> None:
    job = SimJob()
    del job.trainers["t-22"]  # two trainers, to be three
    assert preview(147, 1, 2)[0] == ScaleTrainers(3)
    loop, said = loop_for(job, seed=147, kills=1, scale=True)
    loop.step()
    assert [s.trainers for s in loop.scales] == [3]
    assert len(job.processes().active_trainers()) == 3
    assert said == ["chaos: scaled trainers to 3"]


def test_a_job_that_ended_gets_no_faults() -> None:
    job = SimJob()
    job.running = False
    loop, _ = loop_for(job, seed=7, kills=3)
    loop.run(deadline=time.monotonic() + 5)
    assert job.killed == []
    assert loop.finished()


class SimStore:
    """The job's etcd: an outage takes it down and back; progress resumes once it is back."""

    def __init__(self, job: SimJob, said: list[str]) -> None:
        self.job, self.said = job, said

    def kill(self) -> None:
        self.said.append("(etcd down)")

    def start(self) -> None:
        self.said.append("(etcd up)")
        self.job.tasks += 1


def test_a_store_outage_follows_its_kill_and_leaves_the_seeds_kills_alone() -> None:
    job = SimJob()
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=4, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, outage=0.01, outage_after=2)
    loop = ChaosLoop(opts, job, job, Planner(7, opts.trainers, scale=False, gap=opts.gap),
                     job.scale_to, said.append, host=HERE, kill=job.kill,
                     store=SimStore(job, said))
    job.done_after = 4
    loop.run(deadline=time.monotonic() + 5)
    assert [k.role for k in loop.kills] == [
        s.role for s in preview(7, 4, 2, scale=False) if isinstance(s, KillRole)]
    (outage,) = loop.outages
    assert outage.serving_s is not None
    assert outage.throughput_s is not None
    kills = [i for i, line in enumerate(said) if line.startswith("chaos: kill")]
    assert kills[1] < said.index("(etcd down)") < said.index("(etcd up)") < kills[2]


class StuckJob(SimJob):
    """A job whose kills are replaced but whose training never moves again."""

    def kill(self, pid: int) -> None:
        tasks = self.tasks
        super().kill(pid)
        self.tasks = tasks


def test_a_fault_after_which_training_does_not_progress_is_recorded_as_stalled() -> None:
    job = StuckJob()
    loop, _ = loop_for(job, seed=7, kills=1, recovery_timeout=0.3)
    job.done_after = None  # and never done
    loop.step()
    (kill,) = loop.kills
    assert kill.serving_s is not None  # the role came back ...
    assert (kill.throughput_s, kill.stalled) == (None, True)  # ... but training did not
    live = SimJob()
    loop, _ = loop_for(live, seed=7, kills=1)
    loop.step()
    assert (loop.kills[0].stalled, loop.kills[0].throughput_s is not None) == (False, True)


def test_a_scale_step_is_timed_until_training_progresses() -> None:
    job = SimJob()
    del job.trainers["t-22"]
    original = job.scale_to

    def scale_and_progress(count: int) -> None:
        original(count)
        job.tasks += 1

    loop, _ = loop_for(job, seed=147, kills=1, scale=True)
    loop.scale_to = scale_and_progress
    loop.step()
    (scale,) = loop.scales
    assert scale.settled_s is not None
    assert scale.throughput_s is not None
    assert not scale.stalled


class ReshardingJob(SimJob):
    """Also publishes checkpoints (a new one from slot 0 once asked twice) and reshards."""

    def __init__(self) -> None:
        super().__init__()
        self.slots = {0: PServerSlot("s:0", 10, HERE), 1: PServerSlot("s:1", 11, HERE)}
        self.looks = 0
        self.shards: int | None = None
        self.actions: list[str] = []

    def checkpoints(self) -> set[str]:
        self.looks += 1
        return {"pserver/checkpoint/1/000000000001"} | (
            {"pserver/checkpoint/0/000000000002"} if self.looks > 2 else set())

    def layout(self) -> int | None:
        return self.shards

    def kill(self, pid: int) -> None:
        self.actions.append(f"kill {pid}")
        super().kill(pid)

    def scale_to(self, count: int) -> None:
        self.actions.append(f"scale {count}")
        super().scale_to(count)

    def reshard_to(self, count: int) -> None:
        self.actions.append(f"reshard {count}")
        self.shards = count
        self.slots = {i: PServerSlot(f"s:{i}", 200 + i, HERE) for i in range(count)}
        self.tasks += 1


def test_the_scale_down_kill_reshard_schedule_hits_the_pserver_that_just_checkpointed() -> None:
    job = ReshardingJob()
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=1, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="scale-down-kill-reshard")
    loop = ChaosLoop(opts, job, job, Planner(7, opts.trainers, scale=False, gap=opts.gap),
                     job.scale_to, said.append, host=HERE, kill=job.kill,
                     reshard_to=job.reshard_to)
    for _ in range(4):
        loop.step()
    # slot 0 published the new checkpoint: it is the one killed, between the two requests
    assert job.actions == ["scale 1", "kill 10", "reshard 3"]
    assert [k.name for k in loop.kills] == ["0"]
    (reshard,) = loop.reshards
    assert (reshard.pservers, reshard.killed, reshard.serving_s is not None) == (3, "", True)
    # the burst's faults are all timed by the progress after the last one
    assert loop.kills[0].throughput_s is not None
    assert loop.scales[0].throughput_s is not None
    assert loop.scales[0].throughput_s >= loop.kills[0].throughput_s >= reshard.throughput_s
    assert not loop.directed
    assert loop.finished()  # its kill counted towards --kills 1


class MovingJob(SimJob):
    """Training moves on by one task each time the master is asked."""

    def status(self, procs: PublishedProcesses | None = None) -> dict[str, Any]:
        self.tasks += 1
        return super().status(procs)


def test_a_paused_trainer_is_stopped_and_continued_and_the_others_progress_is_timed() -> None:
    import signal

    job = MovingJob()
    signals: list[tuple[int, int]] = []

    def signal_to(pid: int, signum: int) -> None:
        signals.append((pid, signum))

    opts = ChaosOptions(script=Path("train.py"), kills=0, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="slow-sync-member", lease_ttl=1)
    loop = ChaosLoop(opts, job, job, Planner(7, 2, scale=False, gap=opts.gap), job.scale_to,
                     [].append, host=HERE, kill=job.kill, signal_to=signal_to)
    loop.step()
    (pause,) = loop.pauses
    assert [s for _, s in signals] == [signal.SIGSTOP, signal.SIGCONT]
    assert signals[0][0] == signals[1][0] in {20, 21}  # one of this host's trainers
    assert pause.seconds == 3.0
    assert (pause.stalled, pause.wake_stalled) == (False, False)
    assert pause.throughput_s is not None
    assert pause.after_wake_s is not None


def test_a_job_that_stops_progressing_after_the_last_fault_is_caught_and_stopped() -> None:
    job = SimJob()  # never done, and nothing moves once the kills are over
    loop, said = loop_for(job, seed=7, kills=2, recovery_timeout=0.3)
    job.done_after = None
    loop.run(deadline=time.monotonic() + 5)
    assert len(loop.kills) == 2
    assert loop.tail_stall is not None
    assert loop.tail_stall > 0.3
    assert "no training progress" in said[-1]
    from elasticps.chaos.report import ChaosRecord, JobRun, faults_of, liveness

    record = ChaosRecord(JobRun(0, 1.0, Path("w"), Path("o")), loop.kills,
                         tail_stall_s=loop.tail_stall)
    assert not liveness(faults_of(record), 16.0, 0.3)["ok"]


def test_the_kill_trainer_then_pserver_schedule_kills_one_of_this_hosts_trainers_then_slot_0(
        ) -> None:
    job = MovingJob()
    opts = ChaosOptions(script=Path("train.py"), kills=2, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="kill-trainer-then-pserver")
    loop = ChaosLoop(opts, job, job, Planner(7, 2, scale=False, gap=opts.gap), job.scale_to,
                     [].append, host=HERE, kill=job.kill)
    loop.step()
    loop.step()
    assert [k.role for k in loop.kills] == ["trainer", "pserver"]
    assert job.killed[0] in {20, 21}  # one of this host's trainers, never t-22 elsewhere
    assert job.killed[1] == 10  # slot 0's pserver
    assert all(k.throughput_s is not None for k in loop.kills)
    assert loop.finished()


class Commits:
    """The stream's writer as the loop sees it: each wait ends with the next commit."""

    def __init__(self, job: SimJob) -> None:
        self.job = job
        self.count = 3
        self.waits: list[tuple[int, list[int]]] = []  # (count waited past, pids killed by then)

    def landed(self) -> int:
        return self.count

    def wait_for_landing(self, count: int, timeout: float) -> bool:
        self.waits.append((count, list(self.job.killed)))
        self.count += 1
        return True


def test_the_stream_commit_master_kill_schedule_kills_the_leader_as_a_partition_commits(
        ) -> None:
    job = SimJob()
    commits = Commits(job)
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=1, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="stream-commit-master-kill",
                        oracle=True, stream=True)
    loop = ChaosLoop(opts, job, job, Planner(7, 2, scale=False, gap=opts.gap), job.scale_to,
                     said.append, host=HERE, kill=job.kill, landings=commits)
    loop.step()
    assert commits.waits == [(3, [])]  # it waited for the next commit, killing nothing first
    loop.step()
    assert job.killed == [1]  # the leader, at once
    assert job.leaders_killed_with_a_standby == [True]
    assert [(k.role, k.serving_s is not None) for k in loop.kills] == [("master", True)]
    assert "partition 3 of the stream committed" in said[0]
    assert loop.finished()  # its kill counted towards --kills 1


def test_the_every_role_stream_schedule_kills_each_role_as_a_partition_commits() -> None:
    job = SimJob()
    commits = Commits(job)
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=3, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="stream-commit-kill-every-role",
                        oracle=True, stream=True)
    loop = ChaosLoop(opts, job, job, Planner(7, 2, scale=False, gap=opts.gap), job.scale_to,
                     said.append, host=HERE, kill=job.kill, landings=commits)
    for _ in range(6):
        loop.step()
    # each kill right after the commit it waited for, nothing killed before the first
    assert [pids for _, pids in commits.waits] == [[], [1], [1, 10]]
    assert [k.role for k in loop.kills] == ["master", "pserver", "trainer"]
    assert job.killed[2] in (20, 21)  # a trainer of this host (t-22 runs elsewhere)
    assert loop.finished()


def test_the_stream_schedule_without_a_stream_is_skipped_and_said() -> None:
    job = SimJob()
    said: list[str] = []
    opts = ChaosOptions(script=Path("train.py"), kills=1, seed=7, scale=False, gap=(0.0, 0.0),
                        recovery_timeout=5.0, schedule="stream-commit-master-kill")
    loop = ChaosLoop(opts, job, job, Planner(7, 2, scale=False, gap=opts.gap), job.scale_to,
                     said.append, host=HERE, kill=job.kill)
    loop.step()
    assert loop.directed_done == ["AwaitPartition() skipped"]
    assert "no stream is written" in said[0]
