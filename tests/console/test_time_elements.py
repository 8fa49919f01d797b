"""One way to show a time: every time on a page is a <time datetime="ISO"
title="absolute UTC"> with a relative text (receipts, audit, passes, lists,
detail, approvals)."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from devtools import screenshots
from sandboxes.models.choices import Stage
from tests import factories as f
from tests.console.conftest import clean_compare

TIME = re.compile(r"<time ([^>]*)>([^<]*)</time>")
SVG = re.compile(r"<svg.*?</svg>", re.S)
# Relative text: "20 s ago", "in 40 s", "now", or words around one duration
# ("next attempt in 4 min", "awaiting approval for 2 d", a kept age "2 h").
RELATIVE = re.compile(
    r"^(now|in .+|.+ ago|([a-z ,]+ )?\d+(\.\d)? (s|min|h|d)( \d+ (s|min|h))?)"
    r"( · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)?$"
)


@pytest.fixture
def world(db):
    now = timezone.now()
    r = f.RetirementFactory(
        stage=Stage.FAILED,
        next_attempt_at=now + timedelta(minutes=4),
        failing_since=now - timedelta(hours=2),
        reported_at=now,
    )
    clean_compare(r)
    awaiting = f.RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(awaiting)
    f.AuditEventFactory(object_id=str(r.pk), sandbox_id=r.provider_lease_id)
    f.ReconcilerPassFactory(records={"advanced": [str(r.pk)]})
    f.ApiTokenFactory(name="runtime")
    return r


def _times(body: str) -> list[tuple[str, str]]:
    return TIME.findall(body)


def test_every_time_on_every_page_is_one_element(as_admin, world):
    pages = screenshots.console_pages()
    from sandboxes.models import ReconcilerPass

    pages.append(("pass", reverse("pass-detail", kwargs={"pk": ReconcilerPass.objects.get().pk})))
    seen = {}
    for name, path in pages:
        response = as_admin.get(path)
        if response.status_code != 200:
            continue
        body = response.content.decode()
        # No time outside an element: no bare "… ago", no "2026-12-02 00:28" text.
        # (The trend chart's SVG labels its points in its own <title>s.)
        rest = TIME.sub("", SVG.sub("", body.split("<main", 1)[1]))
        assert " ago" not in rest, name
        assert not re.search(r">[^<]*\d{4}-\d\d-\d\d \d\d:\d\d", rest), name
        for attrs, text in _times(body):
            assert re.search(r'datetime="\d{4}-\d\d-\d\dT[^"]+\+00:00"', attrs), (name, attrs)
            assert re.search(r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"', attrs), (name, attrs)
            assert RELATIVE.match(text), (name, text)
        seen[name] = len(_times(body))
    for name in ("dashboard", "kept-sandboxes", "sandbox", "audit", "passes", "approvals"):
        assert seen.get(name), f"{name} shows no time"


def test_the_list_says_when_the_next_attempt_is(as_reviewer, world):
    body = as_reviewer.get(reverse("sandbox-list")).content.decode()
    assert any(text.endswith(("in 4 min", "in 3 min 59 s")) for _, text in _times(body))


def test_receipts_on_the_detail_page_are_times(as_reviewer, world):
    body = as_reviewer.get(reverse("sandbox-detail", kwargs={"pk": world.pk})).content.decode()
    receipts = body.split('id="receipts-h"', 1)[1]
    assert _times(receipts)
