"""Attach verified exports to their Paperclip task (docs/rules.md, salvage on the
task): a sweep each pass runs after its records, apart from them. The bytes are
the console's own verified copy, so the sandbox may be long gone; a refusal
is shown on the record and retried with backoff, and never holds a destroy.

One `PaperclipUpload` per verified `salvage_export` receipt of a task. A due row
is claimed (`claimed_until`, `attempt_id`; SKIP LOCKED, so workers on several
machines share the rows); its parts are built, each attached and read back
through `GET /api/attachments/:id/content` and checked (sha256, size); when
every part reads back right a `paperclip_attachment` receipt records
Paperclip's attachment ids, the task, the company and the part hashes."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sandboxes.models import Issue, PaperclipUpload, Receipt, ReceiptKind, UploadStatus
from sandboxes.paperclip import archive
from sandboxes.paperclip.client import PaperclipClient, PaperclipError
from sandboxes.receipts import write_receipt

from .failures import backoff

log = logging.getLogger(__name__)
CLAIM = timedelta(minutes=15)
DISCOVER_BATCH = 500
NO_COMPANY = (
    "the task's company is not known to the console, and Paperclip's upload route "
    "names it: send company_id on issue.upserted, or mirror issues.company_id"
)


@dataclass
class SweepResult:
    created: int = 0
    attached: int = 0
    failed: int = 0


def configured() -> bool:
    return bool(settings.PAPERCLIP_API_URL)


def client() -> PaperclipClient:
    return PaperclipClient(
        settings.PAPERCLIP_API_URL, timeout=float(settings.PAPERCLIP_TIMEOUT_SECONDS)
    )


def discover(now) -> int:
    """A row for every verified export of a task that has none yet."""
    exports = list(
        Receipt.objects.filter(
            kind=ReceiptKind.SALVAGE_EXPORT,
            payload__verified=True,
            retirement__isnull=False,
            lease__issue__isnull=False,
            paperclip_upload__isnull=True,
        )
        .select_related("lease")
        .order_by("confirmed_at")[:DISCOVER_BATCH]
    )
    rows = [
        PaperclipUpload(
            export_receipt=x,
            retirement_id=x.retirement_id,
            issue_id=x.lease.issue_id,
            next_attempt_at=now,
        )
        for x in exports
    ]
    PaperclipUpload.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def claim_due(now, limit: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(row id, attempt id) of up to `limit` due rows, claimed."""
    claimed = []
    with transaction.atomic():
        due = (
            PaperclipUpload.objects.select_for_update(skip_locked=True)
            .exclude(status=UploadStatus.ATTACHED)
            .filter(next_attempt_at__lte=now)
            .order_by("next_attempt_at")[:limit]
        )
        for row in due:
            row.attempt_id = uuid.uuid4()
            row.claimed_until = now + CLAIM
            row.next_attempt_at = row.claimed_until  # nobody else's until then
            row.save(update_fields=["attempt_id", "claimed_until", "next_attempt_at", "updated_at"])
            claimed.append((row.pk, row.attempt_id))
    return claimed


def _company(row: PaperclipUpload) -> str | None:
    if row.company_id:
        return str(row.company_id)
    company = Issue.objects.filter(pk=row.issue_id).values_list("company_id", flat=True).first()
    return str(company) if company else None


def _fenced(row_id, attempt_id) -> PaperclipUpload | None:
    """The row, locked, if this attempt still holds it (call in a transaction)."""
    row = PaperclipUpload.objects.select_for_update().filter(pk=row_id).first()
    if row is None or row.attempt_id != attempt_id:
        log.warning("paperclip upload %s: claim lost; nothing written", row_id)
        return None
    return row


def _save_parts(row_id, attempt_id, parts: list[dict]) -> None:
    with transaction.atomic():
        row = _fenced(row_id, attempt_id)
        if row is not None:
            row.parts = parts
            row.save(update_fields=["parts", "updated_at"])


def _fail(row_id, attempt_id, words: str, status: int | None, *, pending=False) -> None:
    now = timezone.now()
    with transaction.atomic():
        row = _fenced(row_id, attempt_id)
        if row is None:
            return
        row.attempts += 1
        row.status = UploadStatus.PENDING if pending else UploadStatus.REFUSED
        row.last_error = words[:2000]
        row.last_status_code = status
        row.next_attempt_at = now + backoff(row.attempts)
        row.attempt_id = row.claimed_until = None
        row.save()
    log.warning("paperclip upload %s: %s", row_id, words)


def _attach_parts(row: PaperclipUpload, company: str, api: PaperclipClient) -> list[dict]:
    """Attach and read back every part not already attached and verified with
    the same bytes; returns every part's entry. Raises PaperclipError."""
    export = Receipt.objects.select_related("lease", "retirement").get(pk=row.export_receipt_id)
    ceiling = settings.PAPERCLIP_ATTACHMENT_MAX_BYTES
    done = {(p["part"], p["parts"], p["sha256"]): p for p in row.parts if p.get("verified")}
    entries: list[dict] = []
    for part in archive.parts(export, ceiling, company):
        known = done.get((part.number, part.count, part.sha256))
        if known is not None:
            entries.append(known)
            continue
        got = api.attach(company, str(row.issue_id), part.name, part.data)
        entry = {
            "part": part.number,
            "parts": part.count,
            "name": part.name,
            "size": part.size,
            "sha256": part.sha256,
            "attachment_id": got.id,
            "content_path": got.content_path,
            "verified": False,
        }
        sha, size = api.read_back(got.id, limit=part.size)
        if (sha, size) != (part.sha256, part.size):
            _save_parts(row.pk, row.attempt_id, [*entries, entry])
            raise PaperclipError(
                f"Paperclip's copy of {part.name} (attachment {got.id}) reads back wrong: "
                f"sha256 {sha[:12]}…, {size} bytes; sent sha256 {part.sha256[:12]}…, "
                f"{part.size} bytes. Not counted; it is sent again"
            )
        entry["verified"] = True
        entries.append(entry)
        _save_parts(row.pk, row.attempt_id, entries)
    return entries


def _attached(row_id, attempt_id, company: str, entries: list[dict]) -> None:
    now = timezone.now()
    with transaction.atomic():
        row = _fenced(row_id, attempt_id)
        if row is None:
            return
        receipt = write_receipt(
            row.retirement,
            ReceiptKind.PAPERCLIP_ATTACHMENT,
            payload={
                "issue_id": str(row.issue_id),
                "company_id": company,
                "export_receipt_id": str(row.export_receipt_id),
                "api": settings.PAPERCLIP_API_URL,
                "attachment_ids": [e["attachment_id"] for e in entries],
                "parts": entries,
            },
        )
        row.status = UploadStatus.ATTACHED
        row.company_id = company
        row.parts = entries
        row.receipt = receipt
        row.attached_at = now
        row.last_error = ""
        row.last_status_code = None
        row.attempt_id = row.claimed_until = None
        row.save()


def work(row_id, attempt_id, api: PaperclipClient) -> bool:
    """One attempt at one claimed row; True when it is attached."""
    row = PaperclipUpload.objects.get(pk=row_id)
    company = _company(row)
    if company is None:
        _fail(row_id, attempt_id, NO_COMPANY, None, pending=True)
        return False
    try:
        entries = _attach_parts(row, company, api)
    except PaperclipError as exc:
        _fail(row_id, attempt_id, str(exc), exc.status)
        return False
    except archive.ArchiveError as exc:
        _fail(row_id, attempt_id, f"the export could not be packed: {exc}", None)
        return False
    except OSError as exc:
        _fail(row_id, attempt_id, f"the console's storage could not be read: {exc}", None)
        return False
    except Exception as exc:  # shown on the row, and the sweep goes on to the next
        log.exception("paperclip upload %s failed unexpectedly", row_id)
        _fail(row_id, attempt_id, f"unexpected error: {type(exc).__name__}: {exc}", None)
        return False
    _attached(row_id, attempt_id, company, entries)
    return True


def sweep(now=None, *, api: PaperclipClient | None = None) -> SweepResult | None:
    """Discover, claim and work due uploads; None when Paperclip's API is not configured."""
    if not configured():
        return None
    now = now or timezone.now()
    result = SweepResult(created=discover(now))
    claimed = claim_due(now, settings.PAPERCLIP_UPLOADS_PER_PASS)
    if not claimed:
        return result
    own = api is None
    api = api or client()
    try:
        for row_id, attempt_id in claimed:
            if work(row_id, attempt_id, api):
                result.attached += 1
            else:
                result.failed += 1
    finally:
        if own:
            api.close()
    return result
