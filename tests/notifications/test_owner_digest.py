"""Owners' digests over real SMTP (README: Owner e-mail): a real SMTP server on
loopback (aiosmtpd) receives what Apprise's mailto:// sends, one digest per
owner per hour, with the countdowns as of the moment it is sent."""

import re
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from sandboxes import keep_links
from sandboxes import models as m
from sandboxes.notifications import events, owner_digest, owner_mail
from sandboxes.roles import ADMINS
from sandboxes.rules.window import window_from
from sandboxes.rules.words import absolute
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db):
    return f.UserFactory(username="ada-admin", groups=[ADMINS])


@pytest.fixture
def env(db):
    return f.EnvironmentFactory(name="prod-daytona", notice_period=timedelta(hours=2))


def mail_on(env, admin, url):
    return owner_mail.update_owner_mail(env.pk, actor=admin, url=url, enabled=True, reason="go")


def owner(user_id="user-ann", name="Ann Owner", email="ann@example.com"):
    return m.PaperclipUser.objects.create(id=user_id, name=name, email=email)


def record_of(env, user, *, key, title="Fix the importer", **kwargs):
    issue = f.IssueFactory(key=key, title=title, assignee_user=user)
    lease = f.EnvironmentLeaseFactory(environment=env, issue=issue)
    return f.RetirementFactory(lease=lease, **kwargs)


def give_notice(r, *, left: timedelta):
    """The record in its notice period, announced as the planner announces it."""
    r.stage = m.Stage.NOTICED
    r.retire_after = timezone.now() + left
    r.save()
    with transaction.atomic():
        events.notice(r)
    return r


def retire(r, files: dict[str, int], deleted=()):
    """The record retired after a verified export of `files` (path → size)."""
    entries = []
    for path, size in files.items():
        att = f.AttachmentFactory(issue=r.lease.issue, retirement=r, path=path, size=size)
        entries.append(
            {"path": path, "size": size, "sha256": att.sha256, "attachment": str(att.pk)}
        )
    f.ReceiptFactory(
        kind=m.ReceiptKind.SALVAGE_EXPORT,
        state=None,
        lease=r.lease,
        retirement=r,
        provider_lease_id=r.provider_lease_id,
        actor="system",
        payload={"verified": True, "files": entries, "deleted": list(deleted)},
    )
    r.stage = m.Stage.RETIRED
    r.closed_at = timezone.now()
    r.save()
    with transaction.atomic():
        events.retired(r, "every unsaved file was exported and verified")
    return r


def test_the_owner_receives_one_digest_listing_both_sandboxes_with_their_countdowns(
    env, admin, smtp
):
    mail_on(env, admin, smtp.url())
    ann = owner()
    first = give_notice(
        record_of(env, ann, key="PAP-142"), left=timedelta(days=2, hours=4, minutes=30)
    )
    second = give_notice(
        record_of(env, ann, key="PAP-150", title="Tidy the docs"),
        left=timedelta(hours=5, minutes=10, seconds=30),
    )

    assert owner_digest.send_due() == {"delivered": 1}

    (mail,) = smtp.mails
    assert mail.rcpt_tos == ["ann@example.com"]  # the owner, and nobody else
    assert mail.message["To"] == "ann@example.com"
    assert mail.mail_from == "console@example.com"
    assert mail.message["Subject"] == ("[prod-daytona] 2 sandboxes of your tasks: 2 to be retired")
    body = mail.body
    assert body.startswith("Hello Ann Owner,\n")
    assert "PAP-142 Fix the importer\n" in body and "PAP-150 Tidy the docs\n" in body
    assert f"Sandbox: local:{first.provider_lease_id}" in body
    assert f"Sandbox: local:{second.provider_lease_id}" in body
    assert f"Will be retired in 2 d 4 h, at {absolute(first.retire_after)}." in body
    assert f"Will be retired in 5 h 10 min, at {absolute(second.retire_after)}." in body
    assert f"/sandboxes/{first.pk}/" in body and f"/sandboxes/{second.pk}/" in body
    assert body.index("PAP-142") < body.index("PAP-150")  # in the order announced
    # Each notice line carries its keep link: this notice's, for this owner,
    # valid until the notice ends (sandboxes/keep_links.py).
    links = re.findall(r"  Keep it: http://localhost:8000/keep/([^/\s]+)/\n", body)
    assert len(links) == 2
    read = [keep_links.read(token, now=timezone.now()) for token in links]
    assert [x.retirement_id for x in read] == [first.pk, second.pk]
    assert [x.expires_at for x in read] == [
        first.retire_after.replace(microsecond=0),
        second.retire_after.replace(microsecond=0),
    ]
    assert {x.owner_email for x in read} == {"ann@example.com"}
    notices = m.NotificationEvent.objects.filter(type="retirement.notice")
    assert {x.notice_event_id for x in read} == set(notices.values_list("pk", flat=True))

    digest = m.OwnerDigest.objects.get()
    assert (digest.status, digest.attempts, digest.owner_email) == (
        "delivered",
        1,
        "ann@example.com",
    )
    assert digest.items.count() == 2


def test_a_retirement_lists_what_was_exported_with_its_links(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    r = retire(
        record_of(env, owner(), key="PAP-7"),
        {"src/app.py": 812, "notes/todo.md": 3 * 1024},
        deleted=["old.txt"],
    )

    assert owner_digest.send_due() == {"delivered": 1}

    (mail,) = smtp.mails
    assert mail.message["Subject"] == "[prod-daytona] 1 sandbox of your tasks: 1 retired"
    body = mail.body
    assert "Retired: exported 2 files (3.8 KiB) to the task:" in body
    for a in m.Attachment.objects.filter(retirement=r):
        size = "812 B" if a.path == "src/app.py" else "3 KiB"
        assert f"    {a.path} ({size}) http://localhost:8000/attachments/{a.pk}/" in body
    assert "Deleted since the last save: old.txt" in body


def test_two_owners_get_two_mails(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-1"), left=timedelta(hours=3, minutes=1))
    bob = owner("user-bob", "Bob", "bob@example.com")
    give_notice(record_of(env, bob, key="PAP-2"), left=timedelta(hours=6, minutes=1))

    assert owner_digest.send_due() == {"delivered": 2}

    by_rcpt = {tuple(mail.rcpt_tos): mail for mail in smtp.mails}
    assert set(by_rcpt) == {("ann@example.com",), ("bob@example.com",)}
    assert "PAP-1 " in by_rcpt[("ann@example.com",)].body
    assert "PAP-2" not in by_rcpt[("ann@example.com",)].body
    assert "PAP-2 " in by_rcpt[("bob@example.com",)].body


def test_one_digest_an_hour_the_next_hour_lists_the_new_notices(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    ann = owner()
    give_notice(record_of(env, ann, key="PAP-1"), left=timedelta(hours=8, minutes=1))
    now = timezone.now()
    assert owner_digest.send_due(now) == {"delivered": 1}

    later = give_notice(record_of(env, ann, key="PAP-2"), left=timedelta(hours=9, seconds=20))
    # A second pass in the same hour: the hour's mail went, nothing new is sent.
    assert owner_digest.send_due(now + timedelta(seconds=1)) == {}
    assert owner_digest.send_due(now + timedelta(seconds=2)) == {}
    assert len(smtp.mails) == 1
    assert not later.owner_digest_items.exists()

    next_hour = now + timedelta(hours=1)
    assert owner_digest.send_due(next_hour) == {"delivered": 1}
    assert len(smtp.mails) == 2
    body = smtp.mails[1].body
    assert "PAP-2 " in body and "PAP-1 " not in body
    # Counted down to the moment it is sent: an hour later, an hour less.
    assert f"Will be retired in 8 h, at {absolute(later.retire_after)}." in body
    assert m.OwnerDigest.objects.count() == 2
    assert owner_digest.send_due(next_hour + timedelta(minutes=5)) == {}


def test_an_smtp_outage_is_retried_and_the_owner_gets_one_mail_once_it_is_back(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-9"), left=timedelta(days=1, minutes=1))
    smtp.shut()

    assert owner_digest.send_due() == {"pending": 1}
    digest = m.OwnerDigest.objects.get()
    assert digest.attempts == 1 and digest.status == "pending"
    assert digest.last_error  # a short reason, shown in the log
    assert digest.next_attempt_at > timezone.now()  # backed off
    assert owner_digest.send_due() == {}  # not due again yet

    smtp.open()
    after_backoff = digest.next_attempt_at + timedelta(seconds=1)
    assert owner_digest.send_due(after_backoff) == {"delivered": 1}
    assert owner_digest.send_due(after_backoff + timedelta(minutes=1)) == {}
    (mail,) = smtp.mails
    assert mail.rcpt_tos == ["ann@example.com"] and "PAP-9 " in mail.body
    digest.refresh_from_db()
    assert (digest.status, digest.attempts, digest.last_error) == ("delivered", 2, "")


def test_an_owner_without_an_email_address_gets_nothing_and_the_log_says_so(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    nobody = owner("user-nobody", "No Mail", "")
    r = give_notice(record_of(env, nobody, key="PAP-3"), left=timedelta(hours=3))
    ownerless = f.RetirementFactory(lease__environment=env, lease__issue__assignee_user=None)
    give_notice(ownerless, left=timedelta(hours=3))

    assert owner_digest.send_due() == {}

    assert smtp.mails == []
    no_email = m.OwnerDigest.objects.get(owner_user_id="user-nobody")
    assert (no_email.status, no_email.last_error) == ("no_email", "owner has no e-mail")
    assert list(no_email.items.values_list("retirement_id", flat=True)) == [r.pk]
    no_owner = m.OwnerDigest.objects.get(owner_user_id="")
    assert (no_owner.status, no_owner.last_error) == ("no_owner", "task has no owner")
    assert owner_digest.send_due(timezone.now() + timedelta(hours=2)) == {}
    assert smtp.mails == []


def test_nothing_is_sent_while_the_setting_is_off(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    owner_mail.update_owner_mail(env.pk, actor=admin, enabled=False)
    give_notice(record_of(env, owner(), key="PAP-4"), left=timedelta(hours=3))

    assert owner_digest.send_due() == {}
    assert smtp.mails == [] and not m.OwnerDigest.objects.exists()

    # Turned on again: notices from then on are mailed, not the ones given while off.
    owner_mail.update_owner_mail(env.pk, actor=admin, enabled=True)
    assert owner_digest.send_due() == {}
    assert smtp.mails == []


def test_a_digest_formed_before_the_setting_went_off_is_not_sent(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-5"), left=timedelta(hours=3))
    assert owner_digest.collect() == 1
    owner_mail.update_owner_mail(env.pk, actor=admin, enabled=False)

    assert owner_digest.send_due() == {"failed": 1}
    assert smtp.mails == []
    assert m.OwnerDigest.objects.get().last_error == "owner e-mail is off for this environment"


def test_an_environment_without_the_setting_mails_nobody(env, smtp):
    give_notice(record_of(env, owner(), key="PAP-6"), left=timedelta(hours=3))
    assert owner_digest.send_due() == {}
    assert smtp.mails == [] and not m.OwnerDigest.objects.exists()


def test_a_notice_that_no_longer_stands_says_so_and_a_held_record_carries_no_countdown(
    env, admin, smtp
):
    mail_on(env, admin, smtp.url())
    r = give_notice(record_of(env, owner(), key="PAP-8"), left=timedelta(hours=3))
    m.Retirement.objects.filter(pk=r.pk).update(stage=m.Stage.HELD)

    assert owner_digest.send_due() == {"delivered": 1}
    body = smtp.mails[0].body
    assert f"No longer to be retired at {absolute(r.retire_after)}: it is held now." in body
    assert "Will be retired" not in body


def test_two_workers_filing_at_once_file_each_notice_once(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-10"), left=timedelta(hours=3))
    now = timezone.now()
    # Both saw the event pending; the second files nothing new.
    assert owner_digest.collect(now) == 1
    assert owner_digest.collect(now) == 0
    assert m.OwnerDigest.objects.count() == 1 and m.OwnerDigestItem.objects.count() == 1


def test_a_reconciler_pass_files_and_queues_the_owners_digests(env, admin, smtp, settings):
    from django_q.models import OrmQ

    from sandboxes.reconciler.tasks import reconcile_pass

    if "orm" not in settings.Q_CLUSTER:
        pytest.skip("the broker is Redis here (REDIS_URL); the ORM queue is not used")
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-11"), left=timedelta(hours=3))
    before = OrmQ.objects.count()

    reconcile_pass()

    digest = m.OwnerDigest.objects.get()
    assert digest.status == "pending" and digest.items.count() == 1
    assert OrmQ.objects.count() == before + 1  # its send, for the cluster
    assert smtp.mails == []  # sent by the cluster's worker, not inside the pass


def test_the_sweep_files_and_queues_them_too(env, admin, smtp, settings):
    from sandboxes.notifications import tasks

    if "orm" not in settings.Q_CLUSTER:
        pytest.skip("the broker is Redis here (REDIS_URL); the ORM queue is not used")
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-12"), left=timedelta(hours=3))
    assert tasks.sweep() == {"queued": 0, "owner_digests": 1}
    (pk,) = m.OwnerDigest.objects.values_list("pk", flat=True)
    assert owner_digest.send_digest(pk) == "delivered"
    assert len(smtp.mails) == 1


def test_an_address_apprise_cannot_parse_is_not_mailed_to_anyone_else(env, admin, smtp):
    # Apprise mails its own sender when no recipient parses: the digest fails instead.
    mail_on(env, admin, smtp.url())
    give_notice(
        record_of(env, owner(email="ann at example"), key="PAP-13"), left=timedelta(hours=3)
    )

    assert owner_digest.send_due() == {"failed": 1}
    assert smtp.mails == []
    digest = m.OwnerDigest.objects.get()
    assert "the owner's address 'ann at example' is not one Apprise can mail" in digest.last_error
    assert digest.attempts == 1  # not retried: no retry makes it an address


def test_notices_given_while_the_server_is_down_join_the_digest_waiting_for_it(env, admin, smtp):
    mail_on(env, admin, smtp.url())
    ann = owner()
    give_notice(record_of(env, ann, key="PAP-20"), left=timedelta(days=1))
    smtp.shut()
    assert owner_digest.send_due() == {"pending": 1}

    give_notice(record_of(env, ann, key="PAP-21"), left=timedelta(days=1))
    smtp.open()
    # Back an hour later: one mail with both, not one per hour of the outage.
    next_hour = timezone.now() + timedelta(hours=1)
    assert owner_digest.send_due(next_hour) == {"delivered": 1}
    (mail,) = smtp.mails
    assert "PAP-20 " in mail.body and "PAP-21 " in mail.body
    assert m.OwnerDigest.objects.count() == 1


def test_outside_the_retirement_window_the_digest_waits_for_the_opening(env, admin, smtp):
    # Mon–Fri 09:00–17:00 Berlin; a Saturday noon (UTC) is outside it.
    env.set_window(window_from("Europe/Berlin", "mon,tue,wed,thu,fri", time(9), time(17)))
    env.save()
    mail_on(env, admin, smtp.url())
    give_notice(record_of(env, owner(), key="PAP-7"), left=timedelta(days=3))
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    monday_nine = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)  # 09:00 CET

    assert owner_digest.send_due(saturday) == {"pending": 1}
    digest = m.OwnerDigest.objects.get()
    assert digest.next_attempt_at == monday_nine and digest.attempts == 0
    assert owner_digest.send_due(monday_nine - timedelta(minutes=1)) == {}
    assert smtp.mails == []

    assert owner_digest.send_due(monday_nine) == {"delivered": 1}
    (mail,) = smtp.mails
    assert mail.rcpt_tos == ["ann@example.com"] and "PAP-7 " in mail.body
