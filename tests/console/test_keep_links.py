"""A notice's "keep it" link (docs/rules.md, kept by the owner): signed, single
use, expiring with the notice, bound to the fingerprint the notice saw; it only
ever holds (7 days, in the owner's name, through the operators' own hold), and
its page needs no login. GET asks and writes nothing; POST holds."""

import threading
from datetime import UTC, timedelta
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from sandboxes import actions, keep_links, keeping
from sandboxes import models as m
from sandboxes.notifications import events
from sandboxes.notifications.delivery import message_text
from sandboxes.roles import OPERATORS
from tests import factories as f

pytestmark = pytest.mark.django_db

DANA = "dana@example.com"


def noticed(*, email=DANA, notice=timedelta(hours=2), owner=True):
    """A record in its notice period, with a clean compare as its proof and the
    notice recorded the way the reconciler records it (events.notice)."""
    dana = m.PaperclipUser.objects.create(id=f"user-{email}"[:64], name="Dana", email=email)
    lease = f.EnvironmentLeaseFactory(issue__assignee_user=dana if owner else None)
    r = f.RetirementFactory(lease=lease, stage=m.Stage.NOTICED)
    compare = f.ReceiptFactory(
        kind=m.ReceiptKind.SALVAGE_COMPARE,
        state=None,
        lease=lease,
        retirement=r,
        actor="system",
        payload={"clean": True},
    )
    r.retire_after = timezone.now() + notice
    r.notice_proof = str(compare.pk)
    r.next_attempt_at = r.retire_after
    r.save()
    events.notice(r)
    return r


def notice_of(r) -> m.NotificationEvent:
    return m.NotificationEvent.objects.get(type=m.NotificationType.NOTICE, retirement=r)


def link_of(r) -> str:
    return notice_of(r).payload["keep_url"]


def path_of(url: str) -> str:
    return urlsplit(url).path


def token_of(url: str) -> str:
    return path_of(url).rstrip("/").rsplit("/", 1)[-1]


def state(r) -> dict:
    r.refresh_from_db()
    return {
        **actions.snapshot(r),
        "operator_hold_by": r.operator_hold_by,
        "audit": m.AuditEvent.objects.count(),
        "uses": m.KeepLinkUse.objects.count(),
    }


# --- the link ------------------------------------------------------------------------


def test_the_notice_carries_an_absolute_signed_link_for_its_owner(settings):
    settings.CONSOLE_BASE_URL = "https://console.example.com"
    r = noticed()
    url = link_of(r)
    assert url.startswith("https://console.example.com/keep/")
    link = keep_links.read(token_of(url), now=timezone.now())
    assert link.retirement_id == r.pk
    assert link.notice_event_id == notice_of(r).pk
    assert link.owner_email == DANA and link.owner_user_id == f"user-{DANA}"
    assert link.expires_at == r.retire_after.replace(microsecond=0)
    assert link.fingerprint == keep_links.fingerprint_digest(
        r.receipts.get().payload["fingerprint"]
    )


def test_keep_url_for_a_digest_names_the_current_notice(settings):
    """What the owner digest calls: the same notice, the same single use."""
    settings.CONSOLE_BASE_URL = "https://console.example.com"
    r = noticed()
    record = m.Retirement.objects.with_owners().get(pk=r.pk)
    url = keep_links.keep_url(record, expires_at=record.retire_after)
    assert url.startswith("https://console.example.com/keep/")
    link = keep_links.read(token_of(url), now=timezone.now())
    assert link.notice_event_id == notice_of(r).pk
    assert link.fingerprint == keep_links.read(token_of(link_of(r)), now=timezone.now()).fingerprint


def test_no_owner_or_no_notice_means_no_link():
    r = noticed(owner=False)
    assert notice_of(r).payload["keep_url"] is None
    lone = f.RetirementFactory(lease__issue__assignee_user=None)
    with pytest.raises(keep_links.NoKeepLink):
        keep_links.keep_url(lone, expires_at=timezone.now() + timedelta(hours=1))


def test_the_channel_message_carries_the_link_and_other_events_do_not():
    r = noticed()
    _, body = message_text(notice_of(r).payload)
    assert f"Keep it for 7 days (the owner, no login): {link_of(r)}" in body
    events.needs_attention(r)
    other = m.NotificationEvent.objects.get(type=m.NotificationType.NEEDS_ATTENTION)
    assert "keep_url" not in other.payload
    assert "Keep it" not in message_text(other.payload)[1]


# --- GET asks, POST holds ----------------------------------------------------------------


def test_the_get_asks_and_changes_nothing():
    r = noticed()
    before = state(r)
    page = Client().get(path_of(link_of(r)))
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Keep <code>{r.provider_lease_id}</code> of {r.lease.issue.key} for 7 days?" in text
    assert 'method="post"' in text and "csrfmiddlewaretoken" in text
    assert reverse("sandbox-detail", args=[r.pk]) in text and "Open in the console" in text
    # Never approve or destroy from here.
    for word in ("approve", "attest", "destroy", "retry"):
        assert f"/{word}/" not in text
    assert state(r) == before


def test_the_post_holds_once_in_the_owners_name():
    r = noticed()
    url = path_of(link_of(r))
    client = Client(enforce_csrf_checks=True)
    form = client.get(url)
    csrf = form.cookies["csrftoken"].value
    answer = client.post(url, {"csrfmiddlewaretoken": csrf})
    assert answer.status_code == 200
    r.refresh_from_db()
    until = r.operator_hold_until
    assert r.stage == m.Stage.HELD and m.HoldCode.OPERATOR_HOLD in r.holds
    assert r.operator_hold_by == f"{DANA} (owner, by keep link)"
    assert r.operator_hold_reason == keeping.KEEP_REASON
    assert timedelta(days=7) - timedelta(seconds=5) < until - timezone.now() <= timedelta(days=7)
    assert r.retire_after is None  # the notice stops: nothing is retired at its end
    text = answer.content.decode()
    # The time words every page uses (explain.when), with the zone, in one <time>.
    words = f"{until.astimezone(UTC):%b} {until.day} {until.astimezone(UTC):%H:%M} UTC"
    assert f"Kept by {DANA} (owner, by keep link) until <time" in text
    assert f'title="{until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC">{words}</time>' in text
    row = m.AuditEvent.objects.get(action="retirement.hold", object_id=str(r.pk))
    assert row.actor is None and row.actor_label == f"{DANA} (owner, by keep link)"
    assert row.reason == keeping.KEEP_REASON
    assert row.after["keep_link"] == {
        "notice_event_id": str(notice_of(r).pk),
        "owner_user_id": f"user-{DANA}",
        "owner_email": DANA,
    }
    assert row.before["stage"] == m.Stage.NOTICED and row.after["stage"] == m.Stage.HELD

    before = state(r)
    again = client.post(url, {"csrfmiddlewaretoken": csrf})
    assert again.status_code == 410
    assert "already used" in again.content.decode()
    assert state(r) == before
    # ...and the GET says so too, without a second use.
    assert client.get(url).status_code == 410


def test_the_post_needs_the_csrf_token():
    r = noticed()
    before = state(r)
    answer = Client(enforce_csrf_checks=True).post(path_of(link_of(r)))
    assert answer.status_code == 403
    assert state(r) == before


# --- refusals: plain pages, 4xx, nothing changed -------------------------------------------


def test_it_refuses_after_the_fingerprint_moved():
    r = noticed()
    url = path_of(link_of(r))
    # The lease was resumed by a new run after the notice.
    run = f.HeartbeatRunFactory(issue=r.lease.issue)
    m.EnvironmentLease.objects.filter(pk=r.lease_id).update(heartbeat_run=run)
    before = state(r)
    for method in ("get", "post"):
        answer = getattr(Client(), method)(url)
        assert answer.status_code == 409, method
        assert "changed since the notice" in answer.content.decode()
    assert state(r) == before


def test_it_refuses_a_newer_save_too():
    r = noticed()
    url = path_of(link_of(r))
    m.ExecutionWorkspace.objects.filter(pk=r.lease.execution_workspace_id).update(
        saved_at=timezone.now()
    )
    assert Client().post(url).status_code == 409
    assert not m.KeepLinkUse.objects.exists()


def test_it_refuses_a_forged_signature():
    r = noticed()
    token = token_of(link_of(r))
    before = state(r)
    payload = signing.loads(token, salt=keep_links.SALT)
    forged = [
        token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB"),  # tampered signature
        signing.dumps(payload, salt="another.salt", compress=True),  # not a keep link's
        signing.dumps(payload, key="not-the-secret-key", salt=keep_links.SALT),
        "not-a-link",
        "x" * (keep_links.MAX_TOKEN_CHARS + 1),
        "nul\x00:in:it",
        "ü:ü:ü",
        ".:",
        token.replace(":", "::"),
    ]
    for bad in forged:
        answer = Client().post(reverse("keep", args=[bad]))
        assert answer.status_code == 400, bad
        assert "not a keep link the console sent" in answer.content.decode()
        assert str(r.pk) not in answer.content.decode()
    assert state(r) == before


def test_the_longest_owner_still_makes_a_link_that_reads_back():
    r = noticed(email="d" * 300 + "@example.com")
    token = token_of(link_of(r))
    assert len(token) <= keep_links.MAX_TOKEN_CHARS
    assert keep_links.read(token, now=timezone.now()).owner_email.startswith("ddd")


def test_a_keep_links_holder_may_hold_and_nothing_else():
    """The link only ever holds: every other action refuses its holder."""
    from django.core.exceptions import PermissionDenied

    r = noticed()
    holder = actions.KeepLinkHolder(audit_label="dana@example.com (owner, by keep link)")
    assert actions.can(holder, "hold_retirement")
    for codename in (
        "approve_retirement",
        "retry_retirement",
        "attest_retirement",
        "edit_policy",
        "manage_tokens",
        "download_salvage",
        "view_console",
    ):
        assert not actions.can(holder, codename), codename
    before = state(r)
    for act in (
        lambda: actions.approve(r.pk, actor=holder, reason="x"),
        lambda: actions.retry(r.pk, actor=holder, reason="x"),
        lambda: actions.attest(
            r.pk, actor=holder, typed_sandbox_id=r.provider_lease_id, reason="x"
        ),
        # No hold without an end, either: that is an admin's.
        lambda: actions.hold(r.pk, actor=holder, reason="x", until=None),
    ):
        with pytest.raises((PermissionDenied, actions.ActionRefused)):
            act()
    assert state(r) == before


def test_a_head_asks_too_and_changes_nothing():
    r = noticed()
    before = state(r)
    assert Client().head(path_of(link_of(r))).status_code == 200
    assert state(r) == before


def test_the_page_reads_a_few_rows(django_assert_max_num_queries):
    r = noticed()
    url = path_of(link_of(r))
    with django_assert_max_num_queries(6):
        assert Client().get(url).status_code == 200


def test_a_forged_link_costs_no_database_read(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert Client().post(reverse("keep", args=["bm90IGEgbGluaw:1abc:xyz"])).status_code == 400


def test_a_signed_but_malformed_payload_is_a_400():
    token = signing.dumps({"r": "not-a-uuid"}, salt=keep_links.SALT, compress=True)
    assert Client().get(reverse("keep", args=[token])).status_code == 400


def test_it_refuses_an_expired_link():
    r = noticed()
    past = keep_links.keep_url(
        m.Retirement.objects.with_owners().get(pk=r.pk),
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    before = state(r)
    for method in ("get", "post"):
        answer = getattr(Client(), method)(path_of(past))
        assert answer.status_code == 410, method
        assert "expired" in answer.content.decode()
    assert state(r) == before


def test_a_link_older_than_any_notice_is_expired_by_its_signature(settings):
    r = noticed()
    token = token_of(link_of(r))
    later = timezone.now() + keep_links.MAX_AGE + timedelta(days=1)
    with pytest.raises(keep_links.Expired):
        keep_links.read(token, now=later)


def test_it_refuses_a_retired_record():
    r = noticed()
    url = path_of(link_of(r))
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.RETIRED, closed_at=timezone.now())
    answer = Client().post(url)
    assert answer.status_code == 409
    assert "already retired" in answer.content.decode()
    assert not m.KeepLinkUse.objects.exists()


def test_it_refuses_a_sandbox_an_operator_holds():
    r = noticed()
    url = path_of(link_of(r))
    olga = f.UserFactory(username="olga", groups=[OPERATORS])
    actions.hold(r.pk, actor=olga, reason="still needed", until=f.hold_until(2))
    before = state(r)
    answer = Client().post(url)
    assert answer.status_code == 409
    text = answer.content.decode()
    assert "already held until" in text and "olga" not in text
    assert state(r) == before


def test_the_page_carries_the_consoles_security_headers():
    r = noticed()
    answer = Client().get(path_of(link_of(r)))
    assert "default-src" in answer["Content-Security-Policy"]
    assert answer["Cache-Control"] == "no-store"
    assert answer["X-Frame-Options"] == "DENY"


def test_open_in_the_console_still_needs_a_login():
    r = noticed()
    answer = Client().get(reverse("sandbox-detail", args=[r.pk]))
    assert answer.status_code == 302 and answer["Location"].startswith(reverse("login"))


def test_other_methods_are_refused():
    r = noticed()
    for method in ("put", "patch", "delete", "options"):
        assert getattr(Client(), method)(path_of(link_of(r))).status_code == 405


# --- two clicks at once ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_clicks_at_once_hold_once():
    r = noticed()
    url = path_of(link_of(r))
    n = 4
    barrier = threading.Barrier(n, timeout=10)
    answers, failures = [], []

    def click():
        try:
            barrier.wait()
            answers.append(Client().post(url).status_code)
        except BaseException as exc:  # surfaced below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=click) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures, failures
    assert sorted(answers) == [200] + [410] * (n - 1)
    assert m.KeepLinkUse.objects.count() == 1
    assert m.AuditEvent.objects.filter(action="retirement.hold").count() == 1
