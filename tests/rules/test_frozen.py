"""Frozen dataclasses built in one update (sandboxes/rules/frozen.py) are the
objects their constructor makes, and the listing's callers give every field."""

import dataclasses

import pytest

from sandboxes.rules.codes import RetirementKind, Stage
from sandboxes.rules.frozen import build
from sandboxes.rules.holds import LeaseFacts
from sandboxes.rules.listing import Does, Listed, decide_listing

from .test_holds import CLEAR, NOW
from .test_listing import candidate, record


def _hash(value):
    try:
        return hash(value)
    except TypeError as unhashable:  # a field holds a dict (Listed's reasons)
        return str(unhashable)


def same_object(built, made) -> None:
    """Equal, with the same hash, repr and attributes, every field set."""
    assert type(built) is type(made)
    assert built == made and _hash(built) == _hash(made) and repr(built) == repr(made)
    assert vars(built) == vars(made)
    assert set(vars(built)) == {f.name for f in dataclasses.fields(made)}


def test_built_is_what_the_constructor_makes():
    fields = {f.name: getattr(CLEAR, f.name) for f in dataclasses.fields(LeaseFacts)}
    same_object(build(LeaseFacts, fields.items()), CLEAR)
    same_object(build(LeaseFacts, **fields), CLEAR)
    with pytest.raises(dataclasses.FrozenInstanceError):
        build(LeaseFacts, **fields).status = "released"  # type: ignore[misc]


def _as_constructed(listed: Listed) -> Listed:
    return Listed(**{f.name: getattr(listed, f.name) for f in dataclasses.fields(Listed)})


@pytest.mark.parametrize("held", [False, True], ids=["clear", "held"])
def test_a_created_and_a_tracked_decision_hold_every_field(held):
    facts = {"has_stop_receipt": not held}
    new, tracked = candidate("sb-new", **facts), candidate("sb-old", **facts)
    rec = record(tracked, stage=Stage.HELD, next_attempt_at=None)
    decisions = decide_listing([rec], [new, tracked], {}, NOW)
    assert [d.does for d in decisions] == [Does.CREATE, Does.TRACK]
    for d in decisions:
        same_object(d, _as_constructed(d))
        assert d.kind == RetirementKind.ABANDONED_WARM and d.reason == ""
    assert decisions[0].claimed is False and decisions[0].record is None
    assert bool(decisions[0].holds) is held
