"""A compare that saw nothing is not clean (issue 10 item 1, DOMAIN §2.3).

A lease without `metadata.remoteCwd` falls back to the environment's root; when
that root is missing, or empty while the task's files live elsewhere, the
compare must fail with "workspace root not found": no clean receipt, no export,
nothing destroyed, a retry, and needs_attention after 5 attempts. An empty root
with an empty saved manifest stays clean.

Reproduced end to end: events through `load_events`, then `reconcile --once`,
against the Daytona simulator over loopback and against the local provider.
Paperclip's lease metadata carries the sandbox's working directory as
`remoteCwd` (paperclipai/paperclip, the sandbox environment driver's lease
metadata); the toolbox answers a `cd` into a missing directory with a non-zero
exit, which our hash script maps to exit 3 (sandboxes/providers/wire.py).
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import models as m

from .world import load, reconcile_once, record

pytestmark = pytest.mark.django_db

SAVED = {"README.md": b"# task\n", "src/app.py": b"print('saved')\n"}
ON_SANDBOX = {**SAVED, "notes/unsaved.txt": b"work nobody saved\n"}


BLIND = {
    # The environment root exists but is empty; the task's files are in project/.
    "empty root, files elsewhere": dict(files_root="project", empty_dirs=("workspace",)),
    # The environment root does not exist at all.
    "missing root": dict(files_root="project"),
    # The root holds something else: files are found, but none the save names.
    "root holds other files": dict(
        files_root="project", other_files={"workspace/cache/blob.bin": b"cache"}
    ),
}


@pytest.mark.parametrize("case", sorted(BLIND))
def test_a_compare_that_saw_nothing_fails_retries_and_never_destroys(case, provider, tmp_path):
    sid = provider.make(ON_SANDBOX, **BLIND[case])
    lease = load(tmp_path, provider, sid, saved=SAVED)

    reconcile_once()

    r = record(lease)
    assert r.kind == m.RetirementKind.ABANDONED_WARM
    assert r.stage == m.Stage.FAILED, (r.stage, r.last_error)
    assert r.last_error.startswith("WorkspaceRootNotFound: workspace root not found")
    assert r.attempts == 1 and not r.needs_attention
    (compare,) = r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["clean"] is False
    assert compare.payload["root_not_found"] is True
    assert compare.payload["error"] == "workspace root not found"
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()
    assert not m.Attachment.objects.exists()
    assert provider.deletes(sid) == []
    # Inspection never leaves a sandbox running.
    assert provider.state(sid) == "stopped"
    assert not r.started_for_salvage

    # It retries on the normal backoff and never proves anything; after 5 attempts
    # it needs attention, and still nothing is destroyed.
    assert r.next_attempt_at - timezone.now() > timedelta(seconds=20)
    for _ in range(4):
        m.Retirement.objects.filter(pk=r.pk).update(next_attempt_at=timezone.now())
        reconcile_once()
    r.refresh_from_db()
    assert r.attempts == 5 and r.needs_attention
    assert r.stage == m.Stage.FAILED
    assert r.receipts.filter(kind=m.ReceiptKind.SALVAGE_COMPARE).count() == 5
    assert not r.receipts.filter(kind=m.ReceiptKind.SALVAGE_EXPORT).exists()
    assert provider.deletes(sid) == []
    assert provider.state(sid) == "stopped"
    lease.refresh_from_db()
    assert lease.status == m.LeaseStatus.FAILED


def test_an_attestation_still_retires_a_sandbox_whose_root_is_not_found(provider, tmp_path):
    """The operator's way out of a compare that can never see the files."""
    from django.contrib.auth.models import Permission, User

    from sandboxes import actions

    sid = provider.make(ON_SANDBOX, files_root="project")
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.FAILED
    admin = User.objects.create_user("admin")
    admin.user_permissions.add(Permission.objects.get(codename="attest_retirement"))
    admin = User.objects.get(pk=admin.pk)
    actions.attest(r.pk, actor=admin, typed_sandbox_id=sid, reason="files are in project/")
    reconcile_once()
    r.refresh_from_db()
    assert r.stage == m.Stage.RETIRED
    assert len(provider.deletes(sid)) == 1


def test_the_files_under_remote_cwd_are_compared_not_the_environment_root(provider, tmp_path):
    sid = provider.make(ON_SANDBOX, files_root="project", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved=SAVED, remote_cwd="project")
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    assert [f["path"] for f in export.payload["files"]] == ["notes/unsaved.txt"]


def test_an_empty_root_with_an_empty_saved_manifest_is_clean(provider, tmp_path):
    sid = provider.make({}, files_root="workspace", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved={})
    reconcile_once()
    r = record(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    compare = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["clean"] is True and not compare.payload.get("root_not_found")
    assert len(provider.deletes(sid)) == 1


def test_some_saved_files_missing_is_a_diff_not_a_blind_compare(provider, tmp_path):
    """Only when NONE of the saved files is found is the compare blind."""
    sid = provider.make({"README.md": SAVED["README.md"]}, files_root="workspace")
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    compare = r.receipts.get(kind=m.ReceiptKind.SALVAGE_COMPARE)
    assert compare.payload["deleted"] == ["src/app.py"]
    assert not compare.payload.get("root_not_found")
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)


def test_the_operator_sees_workspace_root_not_found_with_its_receipt(provider, tmp_path, client):
    from django.urls import reverse

    from sandboxes.roles import REVIEWERS
    from tests.factories import UserFactory

    sid = provider.make(ON_SANDBOX, files_root="project", empty_dirs=("workspace",))
    lease = load(tmp_path, provider, sid, saved=SAVED)
    reconcile_once()
    r = record(lease)
    client.force_login(UserFactory(groups=[REVIEWERS]))
    body = client.get(reverse("sandbox-detail", kwargs={"pk": r.pk})).content.decode()
    receipts = body[body.index('id="receipts"') :]
    assert "workspace root not found" in receipts
    assert "none of the 2 saved file(s) is under &#x27;workspace&#x27;" in receipts
    assert "unsaved files" not in receipts
    status = body[body.index('id="panel"') : body.index('id="receipts"')]
    assert "workspace root not found" in status  # the proof line and the last error
