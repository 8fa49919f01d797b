"""Every hold explained the same way everywhere (sandboxes/explain.py): the words
the kept-sandbox list shows are the words of the sandbox's page, the approvals
queue, the API's `holds[].explanation` and the notifications; an operator's hold
says who, why and since when to everyone who can read the record."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from sandboxes import actions
from sandboxes.explain import hold_phrase
from sandboxes.models import NotificationEvent, Retirement
from sandboxes.models.choices import HoldCode, Stage
from sandboxes.notifications import events
from sandboxes.notifications.delivery import message_text
from tests.console.conftest import clean_compare
from tests.factories import EnvironmentFactory, RetirementFactory


@pytest.fixture
def held(operator):
    """Held by the operator fixture (a timed hold), and its run still running."""
    r = RetirementFactory(holds=[HoldCode.RUN_ACTIVE])
    type(r.lease.heartbeat_run).objects.filter(pk=r.lease.heartbeat_run_id).update(status="running")
    until = timezone.now().replace(microsecond=0) + timedelta(days=3)
    actions.hold(r.pk, actor=operator, reason="waiting for the owner", until=until)
    return Retirement.objects.select_related(
        "environment", "lease__issue", "lease__heartbeat_run"
    ).get(pk=r.pk)


def test_the_operator_hold_names_who_why_since_and_until(held, operator):
    words = hold_phrase(HoldCode.OPERATOR_HOLD, held)
    assert words.startswith(f"held by {operator.username}: waiting for the owner (since ")
    assert ", until " in words
    run = hold_phrase(HoldCode.RUN_ACTIVE, held)
    assert run == f"waiting for run {str(held.lease.heartbeat_run_id)[:4]}… (running)"


def test_the_list_and_the_page_say_the_same_words_to_a_reviewer(as_reviewer, held):
    listing = as_reviewer.get(reverse("sandbox-list")).content.decode()
    page = as_reviewer.get(reverse("sandbox-detail", args=[held.pk])).content.decode()
    for code in held.holds:
        words = escape(hold_phrase(code, held))
        assert words in listing and words in page, code


def test_the_approvals_queue_says_them_too(as_operator, db):
    env = EnvironmentFactory(warm_retention=timedelta(hours=24))
    r = RetirementFactory(
        stage=Stage.AWAITING_APPROVAL,
        holds=[HoldCode.RETENTION],
        environment=env,
        lease__environment=env,
        lease__released_at=timezone.now() - timedelta(hours=2),
    )
    clean_compare(r)
    body = as_operator.get(reverse("approvals")).content.decode()
    words = hold_phrase(HoldCode.RETENTION, r)
    assert words.startswith("retention until ") and escape(words) in body
    assert "awaiting approval for " in body


def test_the_api_gives_each_hold_its_explanation(client, operator_token, held):
    _, raw = operator_token
    data = client.get(
        f"/api/v1/kept-sandboxes/{held.provider_lease_id}", HTTP_AUTHORIZATION=f"Bearer {raw}"
    ).json()
    # DOMAIN §4.2: `holds` is the codes; the words go beside them.
    assert data["holds"] == list(held.holds)
    assert data["hold_explanations"] == [
        {"code": code, "explanation": hold_phrase(code, held)} for code in held.holds
    ]
    assert data["operator_hold"]["by"] == held.operator_hold_by != ""
    assert data["operator_hold"]["reason"] == "waiting for the owner"
    assert data["operator_hold"]["until"] == held.operator_hold_until.isoformat()


def test_the_api_list_explains_holds_without_a_query_per_row(
    client, operator_token, db, django_assert_max_num_queries
):
    _, raw = operator_token
    for _ in range(20):
        RetirementFactory(holds=[HoldCode.RUN_ACTIVE, HoldCode.TASK_CAN_RESUME])
    with django_assert_max_num_queries(6):
        response = client.get("/api/v1/kept-sandboxes", HTTP_AUTHORIZATION=f"Bearer {raw}")
    results = response.json()["results"]
    assert len(results) == 20
    assert all(r["holds"] == ["run_active", "task_can_resume"] for r in results)
    assert all(h["explanation"] for r in results for h in r["hold_explanations"])


def test_a_notification_says_the_same_words(held):
    events.needs_attention(held)
    event = NotificationEvent.objects.get(retirement=held)
    assert event.payload["holds"] == list(held.holds)
    assert event.payload["hold_explanations"] == [
        {"code": code, "explanation": hold_phrase(code, held)} for code in held.holds
    ]
    _, body = message_text(event.payload)
    assert f"Hold: {hold_phrase(HoldCode.OPERATOR_HOLD, held)}" in body


def test_the_window_hold_says_when_it_opens_on_the_list_the_page_and_the_api(
    as_reviewer, client, operator_token, django_assert_max_num_queries, db
):
    """docs/rules.md, the retirement window: "outside the retirement window (opens
    Mon 09:00)", in the window's own time zone, with its countdown."""
    from datetime import UTC, time

    from sandboxes.rules.window import DAYS

    day = (timezone.now().astimezone(UTC).weekday() + 3) % 7  # closed whatever the hour
    env = EnvironmentFactory(
        time_zone="Asia/Tokyo",
        window_days=DAYS[day],
        window_start=time(9),
        window_end=time(17),
    )
    r = RetirementFactory(
        stage=Stage.HELD,
        holds=[HoldCode.OUTSIDE_WINDOW],
        environment=env,
        lease__environment=env,
        next_attempt_at=env.window.next_opening(timezone.now()),
    )
    words = f"outside the retirement window (opens {DAYS[day].capitalize()} 09:00)"
    assert hold_phrase(HoldCode.OUTSIDE_WINDOW, r) == words
    listing = as_reviewer.get(reverse("sandbox-list")).content.decode()
    with django_assert_max_num_queries(15):  # the page's budget (test_sandbox_detail.py)
        page = as_reviewer.get(reverse("sandbox-detail", args=[r.pk])).content.decode()
    assert escape(words) in listing and escape(words) in page
    assert "retirement window opens in " in listing
    _, raw = operator_token
    data = client.get(
        f"/api/v1/kept-sandboxes/{r.provider_lease_id}", HTTP_AUTHORIZATION=f"Bearer {raw}"
    ).json()
    assert data["hold_explanations"] == [{"code": "outside_window", "explanation": words}]
    held = client.get(
        "/api/v1/kept-sandboxes?hold=outside_window", HTTP_AUTHORIZATION=f"Bearer {raw}"
    ).json()
    assert [x["sandbox_id"] for x in held["results"]] == [r.provider_lease_id]
