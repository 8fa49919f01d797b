"""A verified export is also attached to the Paperclip task, through Paperclip's
own API, and read back (docs/rules.md, salvage on the task). The server is the
fake in devtools/paperclip_server.py, written from paperclipai/paperclip
server/src/routes/issues.ts @ 42467257fb96 (the attachment routes, their
answers), server/src/attachment-types.ts @ 07e80be34764 (application/zip
allowed; PAPERCLIP_ATTACHMENT_MAX_BYTES, 10 MiB by default) and
server/src/middleware/auth.ts @ 027bd8cc9602 with server/src/routes/authz.ts
@ 09cec30c4792 (Bearer keys; 401, 403)."""

import hashlib
import html
import json
import uuid

import pytest
from django.utils import timezone

from devtools.paperclip_server import FakePaperclip
from sandboxes import models as m
from tests.console.conftest import login
from tests.factories import UserFactory
from tests.paperclip.helpers import KEY, configure, joined, zips

from .conftest import SAVED, retirement_of

pytestmark = pytest.mark.django_db

UNSAVED = {
    "README.md": SAVED["README.md"],
    "src/app.py": b"print('edited after the save')\n",
    "notes/new.txt": b"fresh work\n",
    # old.txt: deleted since the save
}
COMPANY = uuid.uuid4()


@pytest.fixture
def pc():
    with FakePaperclip() as server:
        yield server


@pytest.fixture
def dirty(warm, pc, settings, monkeypatch):
    """A failed warm lease whose sandbox holds unsaved work, its task known to
    Paperclip under COMPANY, and the console pointed at Paperclip."""

    def make(files=UNSAVED, company=COMPANY, **kw):
        lease = warm(status=m.LeaseStatus.FAILED, files=files, issue__company_id=company, **kw)
        pc.add_issue(lease.issue_id, COMPANY)
        configure(settings, monkeypatch, pc, COMPANY)
        return lease

    return make


def upload_of(lease) -> m.PaperclipUpload:
    return m.PaperclipUpload.objects.get(retirement=retirement_of(lease))


def due_now(upload):
    m.PaperclipUpload.objects.filter(pk=upload.pk).update(next_attempt_at=timezone.now())


def test_one_pass_retires_and_attaches_the_export_as_a_zip_with_its_manifest(dirty, pc, reconcile):
    lease = dirty()
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED, (r.stage, r.last_error)
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.ATTACHED, upload.words
    export = r.receipts.get(kind=m.ReceiptKind.SALVAGE_EXPORT)
    receipt = r.receipts.get(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT)
    held = pc.attachments_of(lease.issue_id)
    assert receipt.payload["attachment_ids"] == [a["id"] for a in held] and len(held) == 1
    assert receipt.payload["issue_id"] == str(lease.issue_id)
    assert receipt.payload["company_id"] == str(COMPANY)
    part = receipt.payload["parts"][0]
    assert part["sha256"] == hashlib.sha256(held[0]["data"]).hexdigest()
    assert part["size"] == len(held[0]["data"]) and held[0]["contentType"] == "application/zip"

    [(_, z)] = zips(pc, lease.issue_id)
    manifest = json.loads(z.read("MANIFEST.json"))
    assert {f["path"]: (f["size"], f["sha256"]) for f in manifest["files"]} == {
        p: (len(UNSAVED[p]), hashlib.sha256(UNSAVED[p]).hexdigest())
        for p in ("notes/new.txt", "src/app.py")
    }
    assert manifest["deleted"] == ["old.txt"]
    assert manifest["sandbox"] == {"provider": r.provider, "id": lease.provider_lease_id}
    assert manifest["lease_id"] == str(lease.pk)
    assert manifest["run_id"] == str(lease.heartbeat_run_id)
    assert manifest["record_id"] == str(r.pk)
    assert manifest["export_receipt_id"] == str(export.pk)
    assert joined([z]) == {p: UNSAVED[p] for p in ("notes/new.txt", "src/app.py")}
    # Uploaded once, read back once, both with the key.
    seen = [(s.method, s.status, s.authorization) for s in pc.state.requests]
    assert seen == [("POST", 201, f"Bearer {KEY}"), ("GET", 200, f"Bearer {KEY}")]


def test_parts_are_split_under_a_small_ceiling_and_each_is_read_back(
    dirty, pc, reconcile, settings
):
    ceiling = 20_000
    big = bytes(range(256)) * 200  # 51,200 bytes: larger than any part
    files = {**SAVED, "data/big.bin": big, **{f"notes/{i}.txt": b"x" * 3000 for i in range(6)}}
    lease = dirty(files=files)
    settings.PAPERCLIP_ATTACHMENT_MAX_BYTES = ceiling
    pc.state.max_bytes = ceiling
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.ATTACHED, upload.words
    parts = zips(pc, lease.issue_id)
    assert len(parts) >= 4
    assert all(len(row["data"]) <= ceiling for row, _ in parts)
    assert [p["part"] for p in upload.parts] == list(range(1, len(parts) + 1))
    gets = [s for s in pc.state.requests if s.method == "GET"]
    assert sorted(s.path for s in gets) == sorted(
        f"/api/attachments/{row['id']}/content" for row, _ in parts
    )
    unsaved = {p: d for p, d in files.items() if p not in SAVED}
    assert joined([z for _, z in parts]) == unsaved
    big_entry = next(
        f
        for f in json.loads(parts[0][1].read("MANIFEST.json"))["files"]
        if f["path"] == "data/big.bin"
    )
    assert len(big_entry["chunks"]) >= 3  # a file larger than a part, in chunks across parts


@pytest.mark.parametrize(
    "fault, words",
    [
        ("forbidden", "HTTP 403, Paperclip refused the key access to the task's company"),
        ("too_large", "HTTP 413, the part is larger than Paperclip"),
        ("bad_type", "HTTP 422, Paperclip refused the part"),
        ("error", "HTTP 500, Paperclip failed on its side"),
        ("down", "could not be reached"),
    ],
)
def test_a_refusal_is_shown_and_retried_and_never_blocks_the_destroy(
    dirty, pc, reconcile, fault, words, local
):
    lease = dirty()
    if fault == "down":
        pc.down()
    else:
        pc.state.faults = {fault}
    reconcile()
    r = retirement_of(lease)
    assert r.stage == m.Stage.RETIRED and local.count("destroy") == 1  # not blocked
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.REFUSED and upload.attempts == 1
    assert words in upload.last_error, upload.last_error
    assert upload.next_attempt_at > timezone.now()
    assert not r.receipts.filter(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT).exists()

    # Shown on the record: the detail page and the API's record detail.
    page = login(UserFactory(groups=["operators"])).get(f"/sandboxes/{r.pk}/")
    shown = html.unescape(page.content.decode())
    assert words in shown and "refused, retrying" in shown

    # Not due yet: the next pass does not try; once due, it is attached.
    reconcile()
    assert upload_of(lease).attempts == 1
    if fault == "down":
        pc.up()
    pc.state.faults = set()
    due_now(upload)
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.ATTACHED, upload.words
    assert upload.last_error == ""
    assert r.receipts.filter(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT).count() == 1


def test_the_api_record_detail_shows_the_refusal(dirty, pc, reconcile, operator_token):
    lease = dirty()
    pc.state.faults = {"forbidden"}
    reconcile()
    _, raw = operator_token
    answer = login_api(raw).get(f"/api/v1/kept-sandboxes/{lease.provider_lease_id}")
    assert answer.status_code == 200
    [shown] = answer.json()["paperclip_uploads"]
    assert shown["status"] == "refused" and shown["last_status_code"] == 403
    assert "refused the key access to the task's company" in shown["words"]
    assert shown["attachment_ids"] == []


def login_api(raw):
    from django.test import Client

    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_a_part_that_reads_back_wrong_is_refused_and_no_receipt_is_written(dirty, pc, reconcile):
    lease = dirty()
    pc.state.faults = {"corrupt"}
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.REFUSED
    assert "reads back wrong" in upload.last_error
    assert upload.parts and not any(p["verified"] for p in upload.parts)
    assert upload.attachment_ids == []
    assert not m.Receipt.objects.filter(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT).exists()
    pc.state.faults = set()
    due_now(upload)
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.ATTACHED
    # The bad copy is not among the ids the receipt counts.
    assert len(upload.attachment_ids) == 1 and len(pc.attachments_of(lease.issue_id)) == 2


def test_the_key_goes_to_no_other_host(dirty, pc, reconcile):
    lease = dirty()
    with FakePaperclip() as elsewhere:
        pc.state.faults = {"redirect"}
        pc.state.redirect_to = f"{elsewhere.url}/api/attachments/x/content"
        reconcile()
        assert elsewhere.state.requests == []  # not followed, so no key went there
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.REFUSED
    assert "redirect" in upload.last_error and "not followed" in upload.last_error


def test_a_task_with_no_company_says_so_and_is_attached_once_ingest_names_it(
    dirty, pc, reconcile, ingest_token
):
    from devtools.events import Events

    lease = dirty(company=None)
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.PENDING
    assert "the task's company is not known" in upload.last_error
    assert "waiting" in upload.words and pc.state.requests == []

    # issue.upserted with company_id, through the ingest API.
    event = Events().issue(str(lease.issue_id), "in_progress", company_id=str(COMPANY))
    _, raw = ingest_token
    answer = login_api(raw).post(
        "/api/v1/events", {"events": [event]}, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    due_now(upload)
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.ATTACHED, upload.words
    assert str(upload.company_id) == str(COMPANY)


def test_without_paperclip_api_url_nothing_changes(dirty, pc, reconcile, settings):
    lease = dirty()
    settings.PAPERCLIP_API_URL = ""
    reconcile()
    assert retirement_of(lease).stage == m.Stage.RETIRED
    assert not m.PaperclipUpload.objects.exists()
    assert pc.state.requests == []


def test_the_live_page_moves_when_the_upload_does(dirty, pc, reconcile):
    """A second refusal writes no receipt and leaves the closed record as it is;
    the page's poll still sees the new words."""
    from sandboxes.views.sandboxes import detail_fingerprint

    lease = dirty()
    pc.state.faults = {"error"}
    reconcile()
    r = retirement_of(lease)
    due_now(upload_of(lease))
    before = detail_fingerprint(r)
    reconcile()
    assert upload_of(lease).attempts == 2
    assert detail_fingerprint(r) != before


def test_a_part_over_paperclips_own_ceiling_is_refused_in_words(dirty, pc, reconcile, settings):
    """Paperclip answers 422 "Attachment exceeds N bytes" (multer's
    LIMIT_FILE_SIZE, issues.ts @ 42467257fb96), not 413."""
    lease = dirty(files={**SAVED, "big.bin": b"b" * 40_000})
    settings.PAPERCLIP_ATTACHMENT_MAX_BYTES = 100_000
    pc.state.max_bytes = 20_000
    reconcile()
    upload = upload_of(lease)
    assert upload.status == m.UploadStatus.REFUSED and upload.last_status_code == 422
    assert "Attachment exceeds 20000 bytes" in upload.last_error
    assert retirement_of(lease).stage == m.Stage.RETIRED
