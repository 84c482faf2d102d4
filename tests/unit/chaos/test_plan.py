"""The seed decides the schedule; how many targets a role has at the time does not."""

from __future__ import annotations

import pytest

from elasticps.chaos.plan import SCALE_CHANCE, KillRole, Planner, ScaleTrainers, preview
from elasticps.chaos.targets import ROLES, Target


def steps(planner: Planner, n: int, available: tuple[str, ...] = ROLES) -> list[object]:
    out = []
    for _ in range(n):
        out.append((round(planner.gap(), 9), planner.next_action(available)))
    return out


def test_the_same_seed_gives_the_same_gaps_and_actions() -> None:
    assert steps(Planner(7, 2), 50) == steps(Planner(7, 2), 50)
    assert steps(Planner(7, 2), 50) != steps(Planner(8, 2), 50)
    gaps = [gap for gap, _ in steps(Planner(3, 2, gap=(0.5, 0.7)), 100)]
    assert all(0.5 <= g <= 0.7 for g in gaps)


def test_picking_among_more_or_fewer_targets_leaves_the_schedule_alone() -> None:
    # Whether a restarted trainer has registered yet is timing; the roles killed must not be.
    few, many = Planner(11, 2), Planner(11, 2)
    one = [Target("trainer", 5, "t")]
    lots = [Target("trainer", pid, f"t{pid}") for pid in range(1, 9)]
    for _ in range(30):
        assert few.gap() == many.gap()
        assert few.next_action(ROLES) == many.next_action(ROLES)
        assert few.pick(one) == one[0]
        assert many.pick(lots) in lots
    with pytest.raises(ValueError, match="no target"):
        few.pick([])


def test_kills_go_only_to_roles_with_a_target_and_scale_steps_stay_near_the_start() -> None:
    planner = Planner(5, 2)
    actions = [planner.next_action(("pserver",)) for _ in range(400)]
    kills = [a for a in actions if isinstance(a, KillRole)]
    scales = [a for a in actions if isinstance(a, ScaleTrainers)]
    assert {k.role for k in kills} == {"pserver"}
    assert {s.trainers for s in scales} == {1, 2, 3}
    assert 0.5 * SCALE_CHANCE < len(scales) / len(actions) < 1.5 * SCALE_CHANCE
    assert all(a is None or isinstance(a, ScaleTrainers)
               for a in (Planner(5, 2).next_action(()) for _ in range(50)))
    one = Planner(5, 1)
    assert {a.trainers for a in (one.next_action(ROLES) for _ in range(400))
            if isinstance(a, ScaleTrainers)} == {1, 2}  # never 0 trainers
    no_scale = Planner(5, 2, scale=False)
    assert all(isinstance(no_scale.next_action(ROLES), KillRole) for _ in range(200))


def test_preview_lists_the_steps_of_a_seed_until_its_kills() -> None:
    plan = preview(7, 20, 2)
    assert sum(isinstance(s, KillRole) for s in plan) == 20
    assert isinstance(plan[-1], KillRole)
    assert {s.role for s in plan if isinstance(s, KillRole)} == set(ROLES)
    assert preview(7, 0, 2) == []
    # The end-to-end test's seed (tests/fault/chaos): one kill of every role and a scale step.
    assert preview(148, 3, 2) == [KillRole("master"), KillRole("pserver"), ScaleTrainers(3),
                                  KillRole("trainer")]


def test_directed_schedules_are_fixed_steps_for_the_jobs_size() -> None:
    from elasticps.chaos.plan import (
        SCHEDULES,
        STREAM_SCHEDULES,
        AwaitCheckpoint,
        AwaitPartition,
        DirectedReshard,
        DirectedScale,
        KillMaster,
        KillPServer,
        KillTrainer,
        PauseTrainer,
        directed,
        directed_kills,
    )

    steps = directed("scale-down-kill-reshard", trainers=2, pservers=2, lease_ttl=2)
    assert steps == [AwaitCheckpoint(), DirectedScale(1, then="none"),
                     KillPServer("checkpointed", then="none"), DirectedReshard(3)]
    assert directed("scale-down-kill-reshard", 1, 3, 2)[1:4:2] == [DirectedScale(1, "none"),
                                                                  DirectedReshard(4)]
    restores = directed("two-pserver-restores", 2, 2, 2)
    assert restores == [AwaitCheckpoint(), KillPServer("checkpointed", then="serving"),
                        KillPServer("same")]
    assert directed_kills(restores) == 2
    assert directed("slow-sync-member", 2, 2, lease_ttl=3) == [PauseTrainer(7.0)]
    hybrid = directed("kill-trainer-then-pserver", 2, 2, 2)
    assert hybrid == [KillTrainer(), KillPServer(0)]
    assert directed_kills(hybrid) == 2
    streamed = directed("stream-commit-master-kill", 2, 2, 2)
    assert streamed == [AwaitPartition(), KillMaster()]
    assert directed_kills(streamed) == 1
    assert directed("stream-commit-pserver-kill", 2, 2, 2) == [AwaitPartition(),
                                                                KillPServer(0)]
    assert directed("stream-commit-trainer-kill", 2, 2, 2) == [AwaitPartition(), KillTrainer()]
    every = directed("stream-commit-kill-every-role", 2, 2, 2)
    assert every == [AwaitPartition(), KillMaster(), AwaitPartition(), KillPServer(0),
                     AwaitPartition(), KillTrainer()]
    assert directed_kills(every) == 3
    assert set(SCHEDULES) == {"scale-down-kill-reshard", "two-pserver-restores",
                              "slow-sync-member", "stream-commit-master-kill",
                              "stream-commit-pserver-kill", "stream-commit-trainer-kill",
                              "stream-commit-kill-every-role", "kill-trainer-then-pserver"}
    assert {name for name in SCHEDULES if name.startswith("stream-")} == STREAM_SCHEDULES
    with pytest.raises(ValueError, match="no schedule"):
        directed("nope", 2, 2, 2)
