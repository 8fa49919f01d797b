"""The company Paperclip's upload route needs comes from the mirror: issues'
company_id (migration 0017), as paperclipai/paperclip's issues table holds it.
The fake Paperclip (devtools/paperclip_server.py, from server/src/routes/issues.ts
@ 42467257fb96) answers 422 "Issue does not belong to company" for any other."""

import pytest

from devtools.paperclip_server import FakePaperclip
from sandboxes import models as m
from sandboxes.mirror.sync import mirror_once
from sandboxes.reconciler import paperclip_uploads
from tests import factories as f
from tests.paperclip.helpers import configure, export_of

pytestmark = pytest.mark.django_db


def test_the_company_of_a_mirrored_task_is_the_one_attached_under(
    paperclip, settings, monkeypatch, tmp_path
):
    settings.MEDIA_ROOT = tmp_path / "media"
    issue = paperclip.issue()
    mirror_once(paperclip.dsn, full=True)
    mirrored = m.Issue.objects.get(pk=issue["id"])
    assert mirrored.company_id == paperclip.company["id"]
    lease = f.EnvironmentLeaseFactory(issue=mirrored, execution_workspace__issue=mirrored)
    with FakePaperclip() as pc:
        pc.add_issue(issue["id"], paperclip.company["id"])
        configure(settings, monkeypatch, pc, paperclip.company["id"])
        export = export_of(lease, {"a.txt": b"unsaved\n"})
        paperclip_uploads.sweep()
        row = m.PaperclipUpload.objects.get(export_receipt=export)
        assert row.status == m.UploadStatus.ATTACHED, row.words
        assert row.company_id == paperclip.company["id"]
        [post] = [s for s in pc.state.requests if s.method == "POST"]
        assert post.path.startswith(f"/api/companies/{paperclip.company['id']}/issues/")
