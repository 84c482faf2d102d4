"""Membership.decide: one member's lifecycle through the generations, stepped by hand."""

from __future__ import annotations

from elasticps.store.keys import GroupRecord
from elasticps.trainer.hybrid.membership import (
    Abandon,
    Membership,
    Phase,
    Propose,
    Register,
    Step,
    View,
    Wait,
)

PREFIX = "ab" * 8


def record(generation: int, *members: str) -> GroupRecord:
    return GroupRecord(generation, members, "127.0.0.1", 5000, PREFIX)


def test_a_first_member_registers_proposes_gathers_and_steps() -> None:
    me = Membership("a", patience=10)
    assert me.decide(View(None, 0, frozenset()), 0) == Register()
    assert me.decide(View(None, 0, frozenset({"a", "b"})), 0) == Propose(1, ("a", "b"), 0)
    me.gathering(record(1, "a", "b"), 5)
    view = View(record(1, "a", "b"), 5, frozenset({"a", "b"}))
    assert isinstance(me.decide(view, 0), Wait)
    me.formed()
    assert me.decide(view, 0) == Step(reform=False)


def test_a_vanished_member_or_a_moved_record_abandons_the_generation() -> None:
    me = Membership("a", patience=10)
    me.gathering(record(1, "a", "b"), 5)
    me.formed()
    assert isinstance(me.decide(View(record(1, "a", "b"), 5, frozenset({"a"})), 0), Abandon)
    assert isinstance(me.decide(View(record(2, "a"), 9, frozenset({"a", "b"})), 0), Abandon)
    me.end("b died")
    # the generation that ended is never gathered again: the next one is proposed
    assert me.decide(View(record(1, "a", "b"), 5, frozenset({"a"})), 0) == Propose(2, ("a",), 5)
    assert me.phase is Phase.OUTSIDE
    assert me.log == ["generation 1: b died"]


def test_a_newcomer_is_flagged_by_the_members_and_waits_for_them_up_to_its_patience() -> None:
    member = Membership("a", patience=10)
    member.gathering(record(3, "a"), 7)
    member.formed()
    live = frozenset({"a", "c"})
    assert member.decide(View(record(3, "a"), 7, live), 0) == Step(reform=True)
    newcomer = Membership("c", patience=10)
    assert isinstance(newcomer.decide(View(record(3, "a"), 7, live), 100.0), Wait)
    assert isinstance(newcomer.decide(View(record(3, "a"), 7, live), 109.0), Wait)
    assert newcomer.decide(View(record(3, "a"), 7, live), 110.5) == Propose(4, ("a", "c"), 7)


def test_a_leaver_ends_the_generation_and_is_not_proposed_again() -> None:
    me = Membership("a", patience=10)
    me.gathering(record(1, "a", "b"), 5)
    me.formed()
    assert me.after_round(frozenset({"b"}), reform=False)
    assert me.decide(View(record(1, "a", "b"), 5, frozenset({"a", "b"})), 0) == Propose(
        2, ("a",), 5)
