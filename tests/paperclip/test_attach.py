"""The Paperclip attachment sweep and client outside a pass (docs/rules.md,
salvage on the task), against the fake Paperclip (devtools/paperclip_server.py,
written from paperclipai/paperclip server/src/routes/issues.ts @ 42467257fb96,
server/src/attachment-types.ts @ 07e80be34764, server/src/middleware/auth.ts
@ 027bd8cc9602 and server/src/routes/authz.ts @ 09cec30c4792)."""

import threading
import time
import uuid

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import default_storage
from django.db import connection

from devtools.paperclip_server import FakePaperclip
from paperclip_console.env import envapiurl
from sandboxes import models as m
from sandboxes.paperclip.client import PaperclipClient, PaperclipError, UntrustedHost
from sandboxes.reconciler import paperclip_uploads
from tests import factories as f

from .helpers import configure, export_of, joined, zips

COMPANY = uuid.uuid4()
FILES = {"notes/a.txt": b"unsaved a\n", "src/b.py": b"print('b')\n"}


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def pc():
    with FakePaperclip() as server:
        yield server


@pytest.fixture
def task(db, pc, settings, monkeypatch):
    lease = f.EnvironmentLeaseFactory(issue__company_id=COMPANY)
    pc.add_issue(lease.issue_id, COMPANY)
    configure(settings, monkeypatch, pc, COMPANY)
    return lease


def row_of(export) -> m.PaperclipUpload:
    return m.PaperclipUpload.objects.get(export_receipt=export)


@pytest.mark.django_db
def test_bytes_are_read_through_the_storage_api_not_the_disk(task, pc, settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    }
    export = export_of(task, FILES)
    assert not (settings.MEDIA_ROOT).exists()  # nothing on the disk to read
    paperclip_uploads.sweep()
    assert row_of(export).status == m.UploadStatus.ATTACHED, row_of(export).words
    assert joined([z for _, z in zips(pc, task.issue_id)]) == FILES


@pytest.mark.django_db
def test_a_stored_copy_that_does_not_verify_is_not_sent(task, pc):
    export = export_of(task, FILES)
    name = export.payload["files"][0]["storage"]
    default_storage.delete(name)
    default_storage.save(name, __import__("io").BytesIO(b"tampered"))
    paperclip_uploads.sweep()
    row = row_of(export)
    assert row.status == m.UploadStatus.REFUSED
    assert "stored copy of notes/a.txt does not verify" in row.last_error
    assert pc.state.requests == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "setup, status, words",
    [
        (lambda pc, t: pc.state.keys.clear(), 401, "check PAPERCLIP_API_KEY"),
        (lambda pc, t: pc.state.issues.clear(), 404, "does not know the task"),
        (
            lambda pc, t: pc.add_issue(t.issue_id, uuid.uuid4()),
            422,
            "Issue does not belong to company",
        ),
        (
            lambda pc, t: pc.add_key("board-key-for-tests", "agent", uuid.uuid4()),
            403,
            "another company",
        ),
    ],
)
def test_each_refusal_is_recorded_in_words_with_its_status(task, pc, setup, status, words):
    export = export_of(task, FILES)
    setup(pc, task)
    paperclip_uploads.sweep()
    row = row_of(export)
    assert row.status == m.UploadStatus.REFUSED and row.last_status_code == status
    assert words in row.last_error, row.last_error
    assert not m.Receipt.objects.filter(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT).exists()


@pytest.mark.django_db
def test_no_key_in_the_environment_is_named(task, pc, monkeypatch):
    export = export_of(task, FILES)
    monkeypatch.delenv("PAPERCLIP_API_KEY")
    paperclip_uploads.sweep()
    assert "PAPERCLIP_API_KEY is not set" in row_of(export).last_error
    assert pc.state.requests == []


def test_a_url_off_the_configured_origin_gets_no_request_and_no_key():
    sent = []
    client = PaperclipClient(
        "https://paperclip.example.com",
        api_key=lambda: "secret",
        transport=httpx.MockTransport(lambda req: sent.append(req) or httpx.Response(200)),
    )
    with pytest.raises(UntrustedHost):
        client._send("GET", "https://elsewhere.example.com/api/x", "reading")
    with pytest.raises(UntrustedHost):
        client._send("GET", "http://paperclip.example.com/api/x", "reading")  # another scheme
    assert sent == []
    client._send("GET", "https://paperclip.example.com/api/x", "reading")
    assert [r.headers["authorization"] for r in sent] == ["Bearer secret"]


def test_an_answer_without_an_id_is_not_an_attachment():
    client = PaperclipClient(
        "https://paperclip.example.com",
        api_key=lambda: "k",
        transport=httpx.MockTransport(lambda req: httpx.Response(201, json={"ok": True})),
    )
    with pytest.raises(PaperclipError, match="without an attachment id"):
        client.attach("c", "i", "x.zip", b"PK")


@pytest.mark.parametrize(
    "value, words",
    [
        ("ftp://paperclip.example.com", "must be an http(s) URL"),
        ("https://", "must be an http(s) URL"),
        ("http://paperclip.example.com", "must use https"),
        ("https://user:pw@paperclip.example.com", "must not carry credentials"),
        ("https://paper clip", "must not carry credentials"),
    ],
)
def test_a_bad_api_url_stops_the_start_naming_the_variable(monkeypatch, value, words):
    monkeypatch.setenv("PAPERCLIP_API_URL", value)
    with pytest.raises(ImproperlyConfigured, match="PAPERCLIP_API_URL") as err:
        envapiurl("PAPERCLIP_API_URL")
    assert words in str(err.value)


@pytest.mark.parametrize(
    "value, read",
    [
        ("", ""),
        ("https://paperclip.example.com/", "https://paperclip.example.com"),
        ("http://127.0.0.1:3100", "http://127.0.0.1:3100"),
        ("http://localhost:3100", "http://localhost:3100"),
    ],
)
def test_a_good_api_url_is_read(monkeypatch, value, read):
    monkeypatch.setenv("PAPERCLIP_API_URL", value)
    assert envapiurl("PAPERCLIP_API_URL") == read


@pytest.mark.django_db(transaction=True)
def test_two_workers_attach_an_export_once(task, pc):
    """The second worker starts while the first is uploading: the row is claimed
    (claimed_until, SKIP LOCKED), so it is not sent twice."""
    export = export_of(task, FILES)
    pc.state.upload_delay = 0.6
    errors = []

    def worker():
        try:
            paperclip_uploads.sweep()
        except Exception as exc:  # pragma: no cover - shown by the assert
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=worker)
    first.start()
    time.sleep(0.3)  # the first has claimed the row and is uploading
    second = threading.Thread(target=worker)
    second.start()
    first.join(10)
    second.join(10)
    assert errors == []
    assert len(pc.attachments_of(task.issue_id)) == 1
    assert row_of(export).status == m.UploadStatus.ATTACHED
    assert m.Receipt.objects.filter(kind=m.ReceiptKind.PAPERCLIP_ATTACHMENT).count() == 1


@pytest.mark.django_db
def test_an_unexpected_error_is_shown_on_the_row_and_the_sweep_goes_on(task, pc, monkeypatch):
    first = export_of(task, FILES)
    other = f.EnvironmentLeaseFactory(issue__company_id=COMPANY)
    pc.add_issue(other.issue_id, COMPANY)
    second = export_of(other, {"c.txt": b"c\n"})
    real = paperclip_uploads.archive.parts

    def parts(export, *args):
        if export.pk == first.pk:
            raise RuntimeError("a bug in packing")
        return real(export, *args)

    monkeypatch.setattr(paperclip_uploads.archive, "parts", parts)
    paperclip_uploads.sweep()
    assert row_of(first).status == m.UploadStatus.REFUSED
    assert "unexpected error: RuntimeError: a bug in packing" in row_of(first).last_error
    assert row_of(second).status == m.UploadStatus.ATTACHED
