"""The notice period (issue 17): in auto mode a record whose proof is ready is
announced first (`noticed`, retire_after = now + notice) and destroyed only on
a later pass that re-checks everything; an operator's hold during the notice
keeps the sandbox. And the reconciler's notifications, sent after its commits,
never delay or block a retirement."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import actions
from sandboxes import models as m
from sandboxes.notifications import channels, delivery
from sandboxes.notifications.secrets import encrypt
from sandboxes.reconciler.candidates import judge_lease_locked
from sandboxes.reconciler.failures import NEEDS_ATTENTION_AFTER
from sandboxes.reconciler.gate import DestroyRefused, authorize_destroy
from sandboxes.roles import ADMINS, OPERATORS
from tests import factories as f
from tests.notifications.conftest import allow, serve_receiver

from .conftest import retirement_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(db):
    return f.UserFactory(username="olga", groups=[OPERATORS])


@pytest.fixture
def admin(db):
    return f.UserFactory(username="adam", groups=[ADMINS])


@pytest.fixture
def receiver(settings):
    with serve_receiver() as state:
        allow(settings, state.url)  # loopback is refused unless listed
        yield state


def channel_for(env, url, kind="apprise", **kwargs):
    return m.NotificationChannel.objects.create(
        environment=env,
        name=f"c-{m.NotificationChannel.objects.count()}",
        kind=kind,
        url_encrypted=encrypt(url),
        **kwargs,
    )


def expire_notice(record):
    past = timezone.now() - timedelta(seconds=1)
    m.Retirement.objects.filter(pk=record.pk).update(retire_after=past, next_attempt_at=past)


def test_the_notice_delays_the_destroy_until_a_later_pass(warm, reconcile, local, receiver):
    env = f.EnvironmentFactory(retirement_mode="auto", notice_period=timedelta(hours=2))
    channel_for(env, f"json://{receiver.url}/n")
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)

    before = timezone.now()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED
    assert before + timedelta(hours=2) <= r.retire_after <= timezone.now() + timedelta(hours=2)
    assert r.next_attempt_at == r.retire_after
    assert (
        local.count("destroy") == 0
        and local.inner.get(lease.provider_lease_id).state != "destroyed"
    )
    assert m.AuditEvent.objects.filter(action="retirement.noticed", object_id=str(r.pk)).exists()
    (event,) = m.NotificationEvent.objects.filter(type="retirement.notice")
    assert event.payload["retire_after"] == r.retire_after.isoformat()
    assert event.payload["sandbox"]["id"] == lease.provider_lease_id
    assert event.payload["task"]["key"] == lease.issue.key

    from django.test import Client

    admin = f.UserFactory(username="notice-admin", groups=[ADMINS])
    client = Client()
    client.force_login(admin)
    page = client.get(f"/sandboxes/{r.pk}/").content.decode()
    assert "data-retire-after" in page and "unless held" in page

    reconcile()  # not due yet: nothing happens
    assert retirement_of(lease).stage == m.Stage.NOTICED and local.count("destroy") == 0

    expire_notice(r)
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED and local.count("destroy") == 1
    assert m.NotificationEvent.objects.filter(type="retirement.retired").count() == 1
    # Sent after the commits, by the delivery task: the notice, then the retirement.
    assert delivery.send_due() == {"delivered": 2}
    titles = [json.loads(x.body)["title"] for x in receiver.requests]
    assert any("will be retired" in t for t in titles) and any("was retired" in t for t in titles)


def test_a_hold_during_the_notice_keeps_the_sandbox(warm, reconcile, local, operator):
    env = f.EnvironmentFactory(retirement_mode="auto", notice_period=timedelta(hours=1))
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED
    first_notice = r.retire_after

    actions.hold(r.pk, actor=operator, reason="the owner still needs it", until=f.hold_until())
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD and r.retire_after is None and r.notice_proof == ""
    expire_notice(r)  # the notice period would be over now
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.HELD
    assert local.count("destroy") == 0
    assert local.inner.get(lease.provider_lease_id).state == "stopped"

    # Released: the owner hears again, with a fresh notice period; no destroy yet.
    actions.release_hold(r.pk, actor=operator, reason="done with it")
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.NOTICED and r.retire_after > first_notice
    assert local.count("destroy") == 0
    assert m.NotificationEvent.objects.filter(type="retirement.notice").count() == 2


def test_the_destroy_gate_refuses_without_a_notice_for_this_proof(warm, reconcile, local):
    env = f.EnvironmentFactory(retirement_mode="auto", notice_period=timedelta(hours=1))
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    reconcile()
    r = retirement_of(lease)
    cand = judge_lease_locked(r.lease_id)
    with pytest.raises(DestroyRefused, match="not before"):
        authorize_destroy(r, cand, timezone.now())
    # A notice given for another proof does not count.
    m.Retirement.objects.filter(pk=r.pk).update(
        notice_proof="00000000-0000-0000-0000-000000000000",
        retire_after=timezone.now() - timedelta(hours=1),
    )
    r.refresh_from_db()
    with pytest.raises(DestroyRefused, match="no notice was given for this proof"):
        authorize_destroy(r, cand, timezone.now())
    # Notice off: the gate does not ask for one.
    m.Environment.objects.filter(pk=env.pk).update(notice_period=timedelta(0))
    r.refresh_from_db()
    assert authorize_destroy(r, cand, timezone.now())


def test_a_broken_channel_never_delays_or_blocks_a_retirement(
    warm, reconcile, local, receiver, settings
):
    env = f.EnvironmentFactory(retirement_mode="auto")
    allow(settings, "127.0.0.1:9")  # listed, and nobody listens there
    dead = channel_for(
        env,
        "http://127.0.0.1:9/nobody",
        kind="webhook",
        secret_encrypted=encrypt("whsec_" + "A" * 43 + "="),
    )
    receiver.status = 500
    failing = channel_for(env, f"json://{receiver.url}/fail")
    leases = [warm(env=env) for _ in range(3)]
    for lease in leases:
        f.rebind_to_new_workspace(lease)

    record = reconcile()
    assert record.retired == 3 and local.count("destroy") == 3
    assert receiver.requests == []  # the pass itself sent nothing
    assert m.NotificationDelivery.objects.filter(status="pending").count() == 6

    delivery.send_due()
    for channel in (dead, failing):
        for d in m.NotificationDelivery.objects.filter(channel=channel):
            assert (d.status, d.attempts) == ("pending", 1)
            assert d.last_error and d.next_attempt_at > timezone.now()
    assert {d.response_code for d in failing.deliveries.all()} == {500}


def test_awaiting_approval_is_announced_once(warm, reconcile, receiver):
    env = f.EnvironmentFactory(retirement_mode="manual")
    channel_for(env, f"json://{receiver.url}/a", events=["retirement.awaiting_approval"])
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.AWAITING_APPROVAL
    m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
    reconcile()
    (event,) = m.NotificationEvent.objects.all()
    assert event.type == "retirement.awaiting_approval"
    assert event.payload["record_url"].endswith(f"/sandboxes/{r.pk}/")
    assert m.NotificationDelivery.objects.count() == 1


def test_a_correction_that_stops_a_sandbox_is_announced(sandbox, reconcile, local):
    env = f.EnvironmentFactory(retirement_mode="auto")
    sid = sandbox(stopped=False)
    lease = f.EnvironmentLeaseFactory(
        environment=env,
        provider_lease_id=sid,
        status=m.LeaseStatus.RETAINED,
        disposition=m.Disposition.KEEP_RUNNING,
        heartbeat_run__status=m.RunStatus.FAILED,
    )
    reconcile()
    assert local.count("stop", sid) == 1
    (event,) = m.NotificationEvent.objects.filter(type="correction.stopped")
    assert event.payload["kind"] == "stop_after_unsuccessful_run"
    assert event.payload["sandbox"]["id"] == sid and event.retirement.lease_id == lease.pk


def test_needs_attention_is_announced_when_a_record_turns(warm, reconcile, local, monkeypatch):
    env = f.EnvironmentFactory(retirement_mode="auto")
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)

    def broken(*args, **kwargs):
        raise RuntimeError("toolbox unreachable")

    monkeypatch.setattr(local.inner, "hash_files", broken)
    for _ in range(NEEDS_ATTENTION_AFTER):
        reconcile()
        m.Retirement.objects.filter(lease=lease).update(next_attempt_at=timezone.now())
    r = retirement_of(lease)
    assert r.needs_attention
    (event,) = m.NotificationEvent.objects.filter(type="retirement.needs_attention")
    assert "toolbox unreachable" in event.payload["last_error"]
    assert event.payload["attempts"] == NEEDS_ATTENTION_AFTER


def test_channels_created_through_the_action_hear_the_reconciler(warm, reconcile, admin, receiver):
    env = f.EnvironmentFactory(retirement_mode="auto")
    _, secret = channels.create_channel(
        env.pk, actor=admin, name="hook", kind="webhook", url=f"http://{receiver.url}/h"
    )
    lease = warm(env=env)
    f.rebind_to_new_workspace(lease)
    reconcile()
    assert delivery.send_due() == {"delivered": 1}
    from standardwebhooks.webhooks import Webhook

    body = Webhook(secret).verify(receiver.requests[0].body, receiver.requests[0].headers)
    assert body["type"] == "retirement.retired"
    assert body["data"]["proof"] == "the latest compare found nothing unsaved"
    assert body["data"]["exported"] == []
