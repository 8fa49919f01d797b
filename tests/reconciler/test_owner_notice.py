"""The owner hears by e-mail (README: Owner e-mail), end to end: a pass gives a
notice in auto mode, the owner's digest reaches a real SMTP server on loopback
with the countdown; the retirement a later pass makes, with the file it
exported, comes in the next hour's digest."""

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import models as m
from sandboxes.notifications import owner_digest
from sandboxes.notifications.secrets import encrypt
from sandboxes.rules.words import absolute
from tests import factories as f

from .conftest import SAVED, retirement_of

pytestmark = pytest.mark.django_db


def test_a_pass_notice_and_its_retirement_reach_the_owner_by_e_mail(warm, reconcile, local, smtp):
    env = f.EnvironmentFactory(
        name="prod-daytona", retirement_mode="auto", notice_period=timedelta(hours=2)
    )
    m.OwnerMail.objects.create(
        environment=env,
        url_encrypted=encrypt(smtp.url()),
        enabled=True,
        enabled_at=timezone.now() - timedelta(minutes=1),
    )
    ann = m.PaperclipUser.objects.create(id="user-ann", name="Ann", email="ann@example.com")
    lease = warm(env=env, files={**SAVED, "notes/unsaved.md": b"only here\n"})
    m.Issue.objects.filter(pk=lease.issue_id).update(assignee_user=ann)
    f.rebind_to_new_workspace(lease)

    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.NOTICED
    half_way = r.retire_after - timedelta(hours=1, minutes=30)
    assert owner_digest.send_due(half_way) == {"delivered": 1}
    (notice,) = smtp.mails
    assert notice.rcpt_tos == ["ann@example.com"]
    assert f"{lease.issue.key} " in notice.body
    assert f"Sandbox: local:{lease.provider_lease_id}" in notice.body
    assert f"Will be retired in 1 h 30 min, at {absolute(r.retire_after)}." in notice.body

    m.Retirement.objects.filter(pk=r.pk).update(
        retire_after=timezone.now() - timedelta(seconds=1),
        next_attempt_at=timezone.now() - timedelta(seconds=1),
    )
    reconcile()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED and local.count("destroy") == 1
    assert owner_digest.send_due(half_way + timedelta(minutes=1)) == {}  # this hour's went

    assert owner_digest.send_due(half_way + timedelta(hours=1)) == {"delivered": 1}
    retired = smtp.mails[1].body
    (attachment,) = m.Attachment.objects.filter(retirement=r)
    assert "Retired: exported 1 file (10 B) to the task:" in retired
    assert f"    notes/unsaved.md (10 B) http://localhost:8000/attachments/{attachment.pk}/" in (
        retired
    )
    assert "Will be retired" not in retired  # the notice went in the last hour's mail
