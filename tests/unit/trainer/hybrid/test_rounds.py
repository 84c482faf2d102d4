"""plan_round: which batches of a round count, once, on every member alike."""

from __future__ import annotations

from elasticps.pserver.applied import AppliedSet
from elasticps.trainer.hybrid.rounds import Flag, Header, Kind, plan_round


def test_contributors_average_and_the_learning_rate_follows_the_earliest_batch() -> None:
    headers = [Header(Kind.BATCH, 0, 1, 0, step=7), Header(), Header(Kind.BATCH, 0, 2, 0, step=3)]
    plan = plan_round(headers, AppliedSet())
    assert plan.contributors == (0, 2)
    assert plan.recorded == ((0, 1, 0), (0, 2, 0))
    assert (plan.duplicates, plan.batch_step, plan.leavers, plan.reform) == ((), 3, (), False)


def test_an_applied_batch_and_a_second_holder_of_one_batch_are_duplicates() -> None:
    applied = AppliedSet()
    applied.add(0, 1, 0)
    headers = [Header(Kind.BATCH, 0, 1, 0), Header(Kind.BATCH, 0, 2, 5),
               Header(Kind.BATCH, 0, 2, 5)]
    plan = plan_round(headers, applied)
    assert plan.contributors == (1,)
    assert plan.duplicates == (0, 2)
    assert plan.recorded == ((0, 2, 5),)


def test_a_skipped_batch_is_recorded_but_adds_nothing() -> None:
    plan = plan_round([Header(Kind.SKIPPED, 1, 4, 2), Header(Kind.BATCH, 1, 5, 0)], AppliedSet())
    assert plan.contributors == (1,)
    assert plan.recorded == ((1, 4, 2), (1, 5, 0))


def test_flags_of_any_member_end_the_generation_for_all() -> None:
    headers = [Header(flags=Flag.LEAVE), Header(flags=Flag.REFORM), Header()]
    plan = plan_round(headers, AppliedSet())
    assert (plan.contributors, plan.leavers, plan.reform) == ((), (0,), True)


def test_a_header_survives_its_encoding() -> None:
    header = Header(Kind.BATCH, 3, 2**40, 17, 99, Flag.LEAVE | Flag.REFORM)
    assert Header.decode(header.encode()) == header
