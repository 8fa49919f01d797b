"""A verified export's attachment to the Paperclip task, through Paperclip's own
API (docs/rules.md, salvage on the task): one row per `salvage_export` receipt,
worked apart from the retirement, so a refusal never blocks the destroy the
console's own verified copy proves."""

import uuid

from django.db import models
from django.db.models import Q

from .choices import UploadStatus, enum_check
from .console import Receipt, Retirement


class PaperclipUpload(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    export_receipt = models.OneToOneField(
        Receipt, on_delete=models.PROTECT, related_name="paperclip_upload"
    )
    retirement = models.ForeignKey(
        Retirement, on_delete=models.PROTECT, related_name="paperclip_uploads"
    )
    # Paperclip's task and company: the upload route names both.
    issue_id = models.UUIDField()
    company_id = models.UUIDField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=UploadStatus.choices, default=UploadStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, help_text="Why the last attempt failed, in words.")
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(db_index=True)
    # A worker's claim: the row is its until then, and its writes name attempt_id.
    attempt_id = models.UUIDField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    # Per part: part, parts, name, size, sha256, attachment_id, content_path, verified.
    parts = models.JSONField(default=list, blank=True)
    receipt = models.OneToOneField(
        Receipt, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    attached_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            enum_check("status", UploadStatus, model="paperclip_upload"),
            models.CheckConstraint(
                condition=~Q(status=UploadStatus.ATTACHED) | Q(receipt__isnull=False),
                name="paperclip_upload_attached_has_receipt",
            ),
        ]

    def __str__(self):
        return f"Paperclip upload of {self.export_receipt_id} ({self.status})"

    @property
    def words(self) -> str:
        """The row's state as the detail page and the API say it."""
        if self.status == UploadStatus.ATTACHED:
            n = len(self.parts)
            parts = f"{n} part{'s' * (n != 1)}"
            return f"attached to the Paperclip task as {parts}, each read back and verified"
        when = f"next attempt {self.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC"
        if self.status == UploadStatus.REFUSED:
            return f"refused, retrying (attempt {self.attempts}; {when}): {self.last_error}"
        if self.last_error:
            return f"waiting ({when}): {self.last_error}"
        return "waiting to be attached to the Paperclip task"

    @property
    def attachment_ids(self) -> list[str]:
        return [p["attachment_id"] for p in self.parts if p.get("verified")]
