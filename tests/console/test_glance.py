"""The kept-sandbox list and page at a glance: how long each sandbox has been
kept (since its lease's release), when it goes (a countdown, amber under a day
and red under an hour, in words too, as Coder's "deletion scheduled" banner
turns red near the end), sorted by age and by cost with keyset paging."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sandboxes.costs import cost_sort_expression, daily_cost_expression
from sandboxes.explain import with_glance
from sandboxes.models import Retirement
from sandboxes.models.choices import HoldCode, Stage
from sandboxes.paging import keyset_page
from tests.console.conftest import clean_compare
from tests.factories import EnvironmentFactory, RetirementFactory

PRICES = {
    "price_vcpu_hour_stopped": Decimal("0"),
    "price_memory_gib_hour_stopped": Decimal("0"),
    "price_disk_gib_month_stopped": Decimal("0.0730"),
}


def _kept(hours_ago: float, **kwargs) -> Retirement:
    released = timezone.now() - timedelta(hours=hours_ago)
    return RetirementFactory(
        lease__released_at=released, lease__acquired_at=released - timedelta(hours=1), **kwargs
    )


def _rows(body: str, ids) -> list:
    """The given sandbox ids in the order the page shows them."""
    return sorted(ids, key=lambda sid: body.index(f'data-sandbox="{sid}"'))


def test_the_list_says_how_long_each_sandbox_has_been_kept(as_reviewer, db):
    r = _kept(50)
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert '<th scope="col">Kept</th>' in body
    row = body[body.index(f'data-sandbox="{r.provider_lease_id}"') :]
    assert ">2 d 2 h</time>" in row[: row.index("</tr>")]


@pytest.mark.parametrize(
    ("left", "urgency", "words"),
    [
        (timedelta(hours=30), "later", ""),
        (timedelta(hours=5), "soon", "(under a day)"),
        (timedelta(minutes=20), "now", "(under an hour)"),
    ],
)
def test_a_notice_counts_down_amber_under_a_day_red_under_an_hour(
    as_reviewer, db, left, urgency, words
):
    r = RetirementFactory(stage=Stage.NOTICED, retire_after=timezone.now() + left)
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    row = body[body.index(f'data-sandbox="{r.provider_lease_id}"') :]
    row = row[: row.index("</tr>")]
    assert "retires after the notice, in " in row
    assert f'data-countdown="{urgency}"' in row
    if words:
        assert f"due-{urgency}" in row and words in row
    else:
        assert "due-" not in row


def test_each_stage_has_its_own_countdown(as_reviewer, db):
    now = timezone.now()
    failed = RetirementFactory(
        stage=Stage.FAILED, next_attempt_at=now + timedelta(minutes=4, seconds=30)
    )
    awaiting = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(awaiting)
    held = RetirementFactory(
        stage=Stage.HELD,
        holds=[HoldCode.RETENTION],
        lease__released_at=now - timedelta(hours=19),
        environment=EnvironmentFactory(warm_retention=timedelta(hours=24)),
    )
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert "next attempt in 4 min" in body
    assert "awaiting approval for " in body
    assert "retention ends in 4 h" in body or "retention ends in 5 h" in body
    detail = as_reviewer.get(reverse("sandbox-detail", args=[failed.pk])).content.decode()
    assert "data-goes" in detail and "next attempt in 4 min" in detail
    assert "data-kept" in detail
    detail = as_reviewer.get(reverse("sandbox-detail", args=[held.pk])).content.decode()
    assert "retention ends in" in detail


def test_the_list_sorts_by_how_long_each_is_kept(as_reviewer, db):
    young, old, middle = _kept(1), _kept(72), _kept(10)
    ids = [r.provider_lease_id for r in (young, old, middle)]
    body = as_reviewer.get(reverse("sandbox-list"), {"sort": "kept_since"}).content.decode()
    assert _rows(body, ids) == [
        old.provider_lease_id,
        middle.provider_lease_id,
        young.provider_lease_id,
    ]
    body = as_reviewer.get(reverse("sandbox-list"), {"sort": "-kept_since"}).content.decode()
    assert _rows(body, ids)[0] == young.provider_lease_id


def _priced(disk_gib):
    env = EnvironmentFactory(**PRICES)
    return RetirementFactory(
        environment=env,
        lease__environment=env,
        provider_state="stopped",
        reported_disk_gib=disk_gib,
    )


def test_the_list_sorts_by_cost_with_unknown_last(as_reviewer, db):
    cheap, dear, unknown = _priced(10), _priced(500), RetirementFactory(provider_state="stopped")
    ids = [r.provider_lease_id for r in (cheap, dear, unknown)]
    body = as_reviewer.get(reverse("sandbox-list"), {"sort": "-cost_sort"}).content.decode()
    assert _rows(body, ids) == [
        dear.provider_lease_id,
        cheap.provider_lease_id,
        unknown.provider_lease_id,
    ]


@pytest.mark.parametrize("order", ["-cost_sort", "cost_sort", "kept_since", "-kept_since"])
def test_keyset_pages_over_the_new_orders_lose_and_repeat_nothing(db, order):
    for disk in (10, 10, 500, 30):
        _priced(disk)
    RetirementFactory(provider_state="stopped")
    qs = with_glance(
        Retirement.objects.annotate(daily=daily_cost_expression(), cost_sort=cost_sort_expression())
    )
    seen, cursor = [], None
    while True:
        page = keyset_page(qs, order=order, cursor=cursor, size=2)
        seen += [r.pk for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5
    whole = [r.pk for r in keyset_page(qs, order=order, cursor=None, size=10).items]
    assert seen == whole


def test_a_forged_cost_cursor_is_a_400_naming_it(as_reviewer, db):
    import base64
    import json

    raw = json.dumps({"t": "dec", "v": "NaN", "id": "x"}).encode()
    cursor = base64.urlsafe_b64encode(raw).decode()
    response = as_reviewer.get(reverse("sandbox-list"), {"sort": "-cost_sort", "after": cursor})
    assert response.status_code == 400 and b"after" in response.content


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_glance_costs_no_query_per_row(as_operator, db):
    """Kept since, countdowns, hold phrases and the bulk bar are read with the
    page's rows: 3 records or 30 cost the same number of queries."""
    url = reverse("sandbox-list") + "?sort=-cost_sort"
    for _ in range(3):
        RetirementFactory(stage=Stage.AWAITING_APPROVAL, holds=[HoldCode.RUN_ACTIVE])
    few = _queries(as_operator, url)
    for _ in range(27):
        r = RetirementFactory(stage=Stage.AWAITING_APPROVAL, holds=[HoldCode.RUN_ACTIVE])
        clean_compare(r)
    assert _queries(as_operator, url) == few
