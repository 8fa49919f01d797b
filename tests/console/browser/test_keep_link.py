"""The owner's "keep it" link in a real browser (docs/rules.md, kept by the
owner): no login, the page asks, the button keeps, and the answer says what was
kept and until when - under the console's CSP, with nothing to approve or
destroy. "Open in the console" still asks for a login."""

from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.explain import when_zoned
from tests.console.browser.test_csp import WATCH
from tests.console.test_keep_links import DANA, link_of, noticed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_owners_link_keeps_the_sandbox_and_says_until_when(page, live_server, settings, shot):
    settings.CONSOLE_BASE_URL = live_server.url
    r = noticed()
    url = link_of(r)
    assert url.startswith(live_server.url + "/keep/")
    page.add_init_script(WATCH)

    response = page.goto(url)
    assert response.status == 200
    heading = page.get_by_role("heading", level=1)
    assert heading.inner_text() == (
        f"Keep {r.provider_lease_id} of {r.lease.issue.key} for 7 days?"
    )
    assert page.get_by_role("button").all_inner_texts() == ["Keep it for 7 days"]
    assert m.Retirement.objects.get(pk=r.pk).stage == m.Stage.NOTICED  # the GET kept nothing
    shot(page, "keep-link-ask")

    page.get_by_role("button", name="Keep it for 7 days").click()
    kept = page.locator("[data-kept]")
    kept.wait_for()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and r.operator_hold_until > timezone.now()
    assert kept.inner_text() == (
        f"Kept by {DANA} (owner, by keep link) until {when_zoned(r.operator_hold_until)}."
    )
    assert page.get_by_role("button").count() == 0  # nothing else to press here
    assert page.evaluate("window.__csp") == []
    shot(page, "keep-link-kept")

    page.get_by_role("link", name="Open in the console").click()
    page.wait_for_load_state()
    assert urlsplit(page.url).path == "/accounts/login/"

    # The same link again: a plain refusal, nothing changed.
    again = page.goto(url)
    assert again.status == 410
    assert "already used" in page.locator("[data-keep-refused]").inner_text()
