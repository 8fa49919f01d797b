from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from sandboxes.explain import hold_phrase
from sandboxes.models import Attachment, AuditEvent
from sandboxes.models.choices import LeaseStatus, ReceiptKind, Stage
from sandboxes.rules.holds import HOLDS
from tests.console.conftest import clean_compare
from tests.factories import (
    EnvironmentLeaseFactory,
    ReceiptFactory,
    RetirementFactory,
)

HX = {"HTTP_HX_REQUEST": "true"}


def _detail(client, r, **params):
    return client.get(reverse("sandbox-detail", kwargs={"pk": r.pk}), params)


def test_it_shows_every_lease_row_on_the_sandbox_as_a_timeline(as_reviewer, db):
    now = timezone.now()
    old = EnvironmentLeaseFactory(
        provider_lease_id="sbx-shared",
        status=LeaseStatus.EXPIRED,
        acquired_at=now - timedelta(days=2),
    )
    new = EnvironmentLeaseFactory(
        provider_lease_id="sbx-shared", environment=old.environment, acquired_at=now
    )
    EnvironmentLeaseFactory(provider_lease_id="sbx-other")
    r = RetirementFactory(lease=new)
    body = _detail(as_reviewer, r).content.decode()
    assert body.index(str(old.pk)) < body.index(str(new.pk))
    assert "sbx-other" not in body
    assert "this retirement's lease" in body


def test_it_explains_every_hold_as_the_list_does(as_reviewer, db):
    r = RetirementFactory(
        holds=["retention", "unknown_age"],
        hold_reasons={"retention": "Released 3 h ago; retention is 24 h."},
    )
    body = _detail(as_reviewer, r).content.decode()
    assert escape(hold_phrase("retention", r)).startswith("retention until ")
    assert escape(hold_phrase("retention", r)) in body
    assert escape(HOLDS["unknown_age"].phrase) in body


def test_a_hold_without_a_stored_reason_shows_the_rules_own_words(as_reviewer, db):
    """Regression: the page kept its own copy of the hold texts, which had no
    line for provider_unsupported (an empty explanation) and worded others
    differently from the reconciler. Now one source: rules/holds.py."""
    r = RetirementFactory(holds=["provider_unsupported", "recovery_open"], hold_reasons={})
    body = _detail(as_reviewer, r).content.decode()
    assert escape(HOLDS["provider_unsupported"].phrase) in body
    key = r.lease.issue.key
    assert escape(HOLDS["recovery_open"].phrase.format(task=key)) in body


def test_it_shows_the_compare_diff_with_sizes(as_reviewer, db):
    r = RetirementFactory()
    clean_compare(
        r,
        clean=False,
        added=[{"path": "new.txt", "size": 2048}],
        changed=[{"path": "src/app.py", "size": 10}],
        deleted=["old.txt"],
        counts={"added": 1, "changed": 1, "deleted": 1},
    )
    body = _detail(as_reviewer, r).content.decode()
    assert (
        '<tr class="chg-added"><td data-label="Change">added</td>'
        '<td data-label="Path"><code>new.txt</code></td>'
    ) in body
    assert "2 KiB" in body
    assert (
        '<tr class="chg-changed"><td data-label="Change">changed</td>'
        '<td data-label="Path"><code>src/app.py</code>'
    ) in body
    assert (
        '<tr class="chg-deleted"><td data-label="Change">deleted</td>'
        '<td data-label="Path"><code>old.txt</code>'
    ) in body
    assert "unsaved files" in body


def test_it_links_exported_files_to_the_stored_attachments(as_reviewer, db):
    r = RetirementFactory()
    compare = clean_compare(r, clean=False, added=[{"path": "notes.md", "size": 5}])
    att = Attachment(issue=r.lease.issue, retirement=r, path="notes.md", sha256="a" * 64, size=5)
    att.file.save(Attachment.storage_name(att.sha256), ContentFile(b"hello"), save=False)
    att.save()
    ReceiptFactory(
        kind=ReceiptKind.SALVAGE_EXPORT,
        state=None,
        lease=r.lease,
        retirement=r,
        payload={
            "verified": True,
            "compare_receipt_id": str(compare.pk),
            "files": [
                {"path": "notes.md", "size": 5, "sha256": "a" * 64, "attachment": str(att.pk)}
            ],
            "deleted": [],
        },
    )
    body = _detail(as_reviewer, r).content.decode()
    link = reverse("attachment", kwargs={"pk": att.pk})
    assert f'href="{link}"' in body
    assert "verified" in body
    download = as_reviewer.get(link)
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == b"hello"
    assert 'filename="notes.md"' in download["Content-Disposition"]


def test_attachments_need_a_login(client, db):
    url = reverse("attachment", kwargs={"pk": "00000000-0000-0000-0000-000000000001"})
    assert client.get(url).status_code == 302


def test_reviewers_see_no_action_buttons(as_reviewer, awaiting):
    body = _detail(as_reviewer, awaiting).content.decode()
    assert "data-actions" not in body
    for label in ("Approve retirement", "Retry now", ">Hold<", "Discard unsaved work"):
        assert label not in body


def test_operators_see_approve_only_when_proof_exists(as_operator, awaiting, unproven):
    body = _detail(as_operator, awaiting).content.decode()
    assert "Approve retirement" in body and "Retry now" in body and ">Hold<" in body
    assert "Discard unsaved work" not in body
    body = _detail(as_operator, unproven).content.decode()
    assert "Approve retirement" not in body
    assert "Approve is unavailable until proof exists" in body


def test_admins_see_the_attest_form(as_admin, unproven):
    assert "Discard unsaved work and retire" in _detail(as_admin, unproven).content.decode()


def test_a_closed_retirement_offers_no_actions(as_admin, db):
    r = RetirementFactory(stage=Stage.RETIRED)
    assert "data-actions" not in _detail(as_admin, r).content.decode()


def test_the_receipts_fragment_refreshes_alone(as_reviewer, awaiting):
    response = as_reviewer.get(
        reverse("sandbox-detail", kwargs={"pk": awaiting.pk}), {"part": "receipts"}, **HX
    )
    assert response.content.lstrip().startswith(b'<section id="receipts"')


def test_it_asks_the_provider_for_its_state_on_demand(as_reviewer, db):
    r = RetirementFactory()  # local provider; the directory does not exist → destroyed
    url = reverse("sandbox-provider-state", kwargs={"pk": r.pk})
    response = as_reviewer.post(url, **HX)
    assert response.status_code == 200
    assert b"data-provider-state>destroyed<" in response.content
    assert as_reviewer.post(url).status_code == 200


def test_asking_the_provider_is_a_post_a_get_is_405_and_writes_nothing(as_reviewer, db):
    """Regression: the ask writes an audit row, yet it was a GET (a link, a
    prefetch or a crawler could make it). Now a POST with CSRF; a GET is 405."""
    r = RetirementFactory()
    url = reverse("sandbox-provider-state", kwargs={"pk": r.pk})
    response = as_reviewer.get(url)
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert not AuditEvent.objects.filter(action="retirement.ask_provider").exists()
    page = _detail(as_reviewer, r).content.decode()
    assert f'hx-post="{url}"' in page and f'hx-get="{url}"' not in page


def test_it_reports_a_provider_error_instead_of_failing(as_reviewer, db, settings):
    settings.DAYTONA_API_URL = ""
    r = RetirementFactory(lease__environment__provider="daytona")
    response = as_reviewer.post(reverse("sandbox-provider-state", kwargs={"pk": r.pk}), **HX)
    assert response.status_code == 200
    assert b"Could not ask the provider" in response.content


@pytest.mark.parametrize("size", [2, 20])
def test_it_runs_a_bounded_number_of_queries(as_admin, django_assert_max_num_queries, size):
    first = EnvironmentLeaseFactory(provider_lease_id="sbx-many")
    for _ in range(size - 1):
        EnvironmentLeaseFactory(provider_lease_id="sbx-many", environment=first.environment)
    r = RetirementFactory(lease=first, stage=Stage.AWAITING_APPROVAL)
    for _ in range(size):
        clean_compare(r)
        ReceiptFactory(lease=first)
    # The same for 2 as for 20 (no query per receipt); 15 since the page shows
    # its countdown, kept-since and Paperclip uploads, and (no pass has run
    # here) the heartbeat reads the schedule on its own.
    with django_assert_max_num_queries(15):
        assert _detail(as_admin, r).status_code == 200


def test_a_closed_record_says_why_and_shows_no_stale_holds(as_reviewer, db):
    # Issue 15, defect 7: a retired record still showed "Size kept"; a dismissed
    # one showed its last holds and never why it was closed.
    now = timezone.now()
    retired = RetirementFactory(
        stage=Stage.RETIRED, size_bytes=4096, closed_at=now, closed_reason="clean compare"
    )
    body = _detail(as_reviewer, retired).content.decode()
    assert "Size kept" not in body
    assert "Size reclaimed" in body and "4 KiB" in body
    dismissed = RetirementFactory(
        stage=Stage.DISMISSED,
        holds=["retention"],
        hold_reasons={"retention": "Still inside the window."},
        closed_at=now,
        closed_reason="no longer a candidate (the predicate stopped matching)",
    )
    body = _detail(as_reviewer, dismissed).content.decode()
    assert "no longer a candidate (the predicate stopped matching)" in body
    assert "Still inside the window." not in body
    assert 'class="holds"' not in body


def test_the_page_tells_the_sandboxes_own_history_as_one_timeline(as_reviewer, db):
    # Issue 15 item 9: its audit rows and receipts, oldest first.
    from tests.factories import AuditEventFactory

    r = RetirementFactory(provider_lease_id="sbx-story")
    AuditEventFactory(
        sandbox_id="sbx-story",
        action="retirement.failed",
        reason="TransientProviderError: 503",
        before={"attempts": 0},
        after={"attempts": 1},
    )
    clean_compare(r)
    AuditEventFactory(sandbox_id="sbx-elsewhere", action="retirement.hold", reason="not mine")
    body = _detail(as_reviewer, r).content.decode()
    history = body.split('id="history"', 1)[1].split("</section>", 1)[0]
    assert "a step failed" in history and "503" in history and "attempts: 0 → 1" in history
    assert "receipt: salvage compare" in history
    assert "not mine" not in history
    assert history.index("a step failed") < history.index("receipt: salvage compare")


def test_the_detail_page_is_live_during_a_pass(as_reviewer, db):
    # Issue 15 item 9: stage, holds and receipts update without reload.
    r = RetirementFactory(stage=Stage.LISTED)
    body = _detail(as_reviewer, r).content.decode()
    fp = body.split('id="state"', 1)[1].split('data-fp="', 1)[1].split('"', 1)[0]
    url = reverse("sandbox-detail", kwargs={"pk": r.pk})
    unchanged = as_reviewer.get(url, {"part": "live", "fp": fp, "stage": "listed"}, **HX)
    assert unchanged.status_code == 204
    r.stage = Stage.AWAITING_APPROVAL
    r.save()
    clean_compare(r)
    changed = as_reviewer.get(url, {"part": "live", "fp": fp, "stage": "listed"}, **HX)
    assert changed.status_code == 200
    html = changed.content.decode()
    assert html.lstrip().startswith('<div id="state"')
    assert 'data-stage="awaiting_approval"' in html
    assert 'id="receipts" aria-labelledby="receipts-h" hx-swap-oob="true"' in html
    assert 'id="history" aria-labelledby="history-h" hx-swap-oob="true"' in html
    assert "stage-changed" in changed["HX-Trigger"]


@pytest.mark.parametrize("size", [10, 100])
def test_the_live_poll_is_cheap(as_reviewer, django_assert_max_num_queries, size):
    from tests.console.fleet import build_fleet

    r = build_fleet(size)[0]
    url = reverse("sandbox-detail", kwargs={"pk": r.pk})
    # The same for 2 as for 20 (no query per receipt); 14 since the page shows
    # its countdown, kept-since and Paperclip uploads.
    with django_assert_max_num_queries(14):
        body = as_reviewer.get(url).content.decode()
    fp = body.split('id="state"', 1)[1].split('data-fp="', 1)[1].split('"', 1)[0]
    with django_assert_max_num_queries(8):
        assert as_reviewer.get(url, {"part": "live", "fp": fp}, **HX).status_code == 204
