"""The uses of "keep it" links (docs/rules.md, kept by the owner): one row per
notice and record, written with the hold it made, so a link holds once."""

import uuid

from django.db import models

from .console import AppendOnlyModel, Retirement


class KeepLinkUse(AppendOnlyModel):
    """A keep link that was used: the notice it came with, whose it was, and the
    end of the hold it made. Unique per (record, notice): every link a notice's
    messages carry for the record (the notice itself, an owner's digest) shares
    one use."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    retirement = models.ForeignKey(
        Retirement, on_delete=models.PROTECT, related_name="keep_link_uses"
    )
    # The notice event's id (sandboxes.NotificationEvent); not a foreign key, so a
    # pruned event never takes the record of a use with it.
    notice_event_id = models.UUIDField()
    owner_user_id = models.CharField(max_length=255)
    owner_label = models.CharField(max_length=200)
    held_until = models.DateTimeField()
    used_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["retirement", "notice_event_id"], name="keeplinkuse_once_per_notice"
            )
        ]

    def __str__(self):
        return f"keep link of {self.owner_label} on {self.retirement_id}"
