"""Operator holds that end on their own (sandboxes/reconciler/hold_ends.py): the
first pass after a hold's end releases it with an audit row ("hold by olga
ended") and the record is judged again in that same pass; a hold whose end has
not come, or an admin's hold with no end, stays."""

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import actions
from sandboxes import models as m
from sandboxes.roles import ADMINS, OPERATORS
from tests import factories as f

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(db):
    return f.UserFactory(username="olga", groups=[OPERATORS])


@pytest.fixture
def manual_record(warm, reconcile):
    """A clean abandoned warm sandbox in a manual environment: one pass compares
    it and leaves it awaiting approval."""
    lease = warm(env=f.EnvironmentFactory(retirement_mode="manual"))
    f.rebind_to_new_workspace(lease)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL
    return r


def _end_now(r):
    """The hold's end has come (as if its time passed)."""
    m.Retirement.objects.filter(pk=r.pk).update(
        operator_hold_until=timezone.now() - timedelta(seconds=1)
    )


def test_a_timed_hold_ends_on_the_next_pass_and_the_record_is_judged_again(
    manual_record, reconcile, operator
):
    actions.hold(manual_record.pk, actor=operator, reason="owner asked", until=f.hold_until())
    reconcile()
    r = retirement_of(manual_record.lease)
    assert r.stage == m.Stage.HELD and r.holds == [m.HoldCode.OPERATOR_HOLD]

    _end_now(r)
    reconcile()
    r.refresh_from_db()
    assert r.operator_hold_reason == "" and r.operator_hold_until is None
    assert m.HoldCode.OPERATOR_HOLD not in r.holds
    # Judged again: no hold left, so it awaits approval as before the hold.
    assert r.stage == m.Stage.AWAITING_APPROVAL
    (ended,) = m.AuditEvent.objects.filter(action="retirement.hold_ended")
    assert ended.reason == "hold by olga ended"
    assert ended.actor is None and ended.actor_label == "system"
    assert ended.object_id == str(r.pk) and ended.sandbox_id == r.provider_lease_id
    assert ended.before["operator_hold_reason"] == "owner asked"
    assert ended.after["operator_hold_reason"] == "" and "operator_hold" not in ended.after["holds"]


def test_a_hold_whose_end_has_not_come_stays(manual_record, reconcile, operator):
    actions.hold(manual_record.pk, actor=operator, reason="owner asked", until=f.hold_until(2))
    reconcile()
    reconcile()
    r = retirement_of(manual_record.lease)
    assert r.stage == m.Stage.HELD and r.operator_hold_reason == "owner asked"
    assert not m.AuditEvent.objects.filter(action="retirement.hold_ended").exists()


def test_an_admins_hold_with_no_end_stays(manual_record, reconcile):
    admin = f.UserFactory(username="adam", groups=[ADMINS])
    actions.hold(manual_record.pk, actor=admin, reason="legal hold")
    r = retirement_of(manual_record.lease)
    assert r.operator_hold_until is None
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and r.operator_hold_reason == "legal hold"


def test_a_dry_run_ends_no_hold(manual_record, reconcile, operator):
    actions.hold(manual_record.pk, actor=operator, reason="owner asked", until=f.hold_until())
    _end_now(manual_record)
    reconcile(dry_run=True)
    r = retirement_of(manual_record.lease)
    assert r.operator_hold_reason == "owner asked"
