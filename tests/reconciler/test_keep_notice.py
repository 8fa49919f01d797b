"""A notice's keep link through real passes (docs/rules.md, kept by the owner):
the pass that gives notice puts the owner's link in it; the owner's keep is the
operators' hold, so the notice's end retires nothing and the destroy gate
refuses; when the 7 days end, the next pass gives a new notice with a new link,
and the old one holds nothing."""

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from sandboxes import models as m
from sandboxes.keep_links import read
from sandboxes.notifications.delivery import message_text
from sandboxes.reconciler.candidates import judge_lease_locked
from sandboxes.reconciler.gate import DestroyRefused, authorize_destroy
from tests import factories as f

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


def notices(r):
    return list(
        m.NotificationEvent.objects.filter(type=m.NotificationType.NOTICE, retirement=r).order_by(
            "created_at"
        )
    )


def owned_warm(warm, env):
    dana = m.PaperclipUser.objects.create(id="user-dana", name="Dana", email="dana@example.com")
    lease = warm(env=env, issue__assignee_user=dana)
    f.rebind_to_new_workspace(lease)
    return lease


def test_the_owners_keep_survives_the_notice_and_a_new_notice_follows(warm, reconcile, local):
    env = f.EnvironmentFactory(retirement_mode="auto", notice_period=timedelta(hours=2))
    lease = owned_warm(warm, env)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED
    (notice,) = notices(r)
    url = notice.payload["keep_url"]
    token = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    link = read(token, now=timezone.now())
    assert link.notice_event_id == notice.pk and link.retirement_id == r.pk
    assert link.expires_at == r.retire_after.replace(microsecond=0)
    assert url in message_text(notice.payload)[1]

    assert Client().post(urlsplit(url).path).status_code == 200
    r.refresh_from_db()
    assert (
        r.stage == m.Stage.HELD and r.operator_hold_by == "dana@example.com (owner, by keep link)"
    )

    # The notice's end comes: nothing is retired, and the gate says why.
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and local.count("destroy") == 0
    with pytest.raises(DestroyRefused, match="operator_hold"):
        authorize_destroy(r, judge_lease_locked(r.lease_id), timezone.now())

    # The 7 days end: the hold ends on its own, and the owner hears again.
    ended = timezone.now() - timedelta(seconds=1)
    m.Retirement.objects.filter(pk=r.pk).update(operator_hold_until=ended)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.NOTICED and local.count("destroy") == 0
    first, second = notices(r)
    assert second.payload["keep_url"] and second.payload["keep_url"] != url
    assert (
        read(
            urlsplit(second.payload["keep_url"]).path.rstrip("/").rsplit("/", 1)[-1],
            now=timezone.now(),
        ).notice_event_id
        == second.pk
    )
    # The first link was used: it holds nothing again.
    assert Client().post(urlsplit(url).path).status_code == 410
