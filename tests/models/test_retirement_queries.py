"""The questions asked of retirement records (`Retirement.objects`): one
definition each, shared by the console, the API, metrics and the reconciler."""

from datetime import timedelta
from itertools import product

import pytest
from django.utils import timezone

from sandboxes.models import Retirement
from sandboxes.models.choices import STAGES_CLOSED, WORKABLE_STAGES, HoldCode, Stage
from tests.factories import EnvironmentFactory, RetirementFactory

pytestmark = pytest.mark.django_db


def _ids(qs) -> set:
    return set(qs.values_list("pk", flat=True))


def test_open_is_every_stage_but_the_closed_ones_and_agrees_with_is_open():
    records = [RetirementFactory(stage=stage) for stage in Stage.values]
    open_ids = _ids(Retirement.objects.open())
    assert open_ids == {r.pk for r in records if r.stage not in STAGES_CLOSED}
    assert open_ids == {r.pk for r in records if r.is_open}


def test_due_is_workable_and_due_or_held_with_a_sandbox_started_for_salvage():
    now = timezone.now()
    times = {
        "past": now - timedelta(seconds=1),
        "now": now,
        "future": now + timedelta(1),
        "none": None,
    }
    expected = set()
    for stage, when, started in product(Stage.values, times, (False, True)):
        r = RetirementFactory(stage=stage, next_attempt_at=times[when], started_for_salvage=started)
        workable_and_due = stage in WORKABLE_STAGES and when in ("past", "now")
        if workable_and_due or (stage == Stage.HELD and started):
            expected.add(r.pk)
    assert _ids(Retirement.objects.due(now)) == expected


def test_with_hold_matches_a_code_in_the_list_not_a_prefix_of_one():
    run = RetirementFactory(holds=[HoldCode.RUN_ACTIVE])
    both = RetirementFactory(holds=[HoldCode.ISSUE_RUN_ACTIVE, HoldCode.RETENTION])
    RetirementFactory(holds=[])
    assert _ids(Retirement.objects.with_hold(HoldCode.RUN_ACTIVE)) == {run.pk}
    assert _ids(Retirement.objects.with_hold(HoldCode.RETENTION)) == {both.pk}


def test_matching_reads_the_list_filters():
    east = EnvironmentFactory(name="east")
    a = RetirementFactory(
        lease__environment=east, stage=Stage.HELD, holds=["retention"], provider_state="stopped"
    )
    b = RetirementFactory(stage=Stage.FAILED, needs_attention=True)
    c = RetirementFactory(stage=Stage.RETIRED)
    q = Retirement.objects.matching
    assert _ids(q({})) == _ids(q({"stage": "open"})) == {a.pk, b.pk}
    assert _ids(q({"stage": "all"})) == {a.pk, b.pk, c.pk}
    assert _ids(q({"stage": Stage.RETIRED})) == {c.pk}
    assert _ids(q({"hold": "retention"})) == {a.pk}
    assert _ids(q({"environment": str(east.pk)})) == _ids(q({"environment": "east"})) == {a.pk}
    assert _ids(q({"provider_state": "stopped"})) == {a.pk}
    assert _ids(q({"attention": "yes"})) == {b.pk}
    assert _ids(q({"attention": "no"})) == {a.pk}
    assert _ids(q({"q": a.provider_lease_id[3:]})) == {a.pk}
    assert _ids(q({"q": str(b.lease_id)})) == {b.pk}
    assert _ids(q({"q": a.lease.issue.key, "stage": "all"})) == {a.pk}
    assert _ids(q({"kind": b.kind, "attention": "yes", "stage": "all"})) == {b.pk}
