"""Signed "keep it" links (docs/rules.md, kept by the owner): the link a notice
carries per sandbox, and what reading one back says. Using a link (the hold it
makes, once) is `sandboxes/keeping.py`; its page is `sandboxes/views/keep.py`.

A link is Django's signing (`signing.dumps`: HMAC-SHA256 over SECRET_KEY with a
salt of its own, timestamped) of what the notice was about: the record, the
notice event, a digest of the record's proof fingerprint when the notice was
given (`sandboxes/proof.py`), the owner's Paperclip user id and e-mail, and the
link's expiry (the notice's end, `retire_after`). Nothing is stored when a link
is made; it is checked by its signature alone, before any database read, so a
flood of forged links costs one HMAC each.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core import signing
from django.urls import reverse

from sandboxes.models import NotificationEvent, NotificationType, Receipt, Retirement
from sandboxes.notifications.links import absolute
from sandboxes.proof import fingerprint_of
from sandboxes.rules.proof import FINGERPRINT_FIELDS, REPLACEMENT

SALT = "sandboxes.keep_links"
# How long a kept sandbox is held (docs/rules.md, kept by the owner).
KEEP_FOR = timedelta(days=7)
# No link lives longer than this, whatever expiry it names: an upper bound for
# the signature's own age check.
MAX_AGE = timedelta(days=92)
# Longer than any link this module signs; a longer one is refused unread.
MAX_TOKEN_CHARS = 2000


class NoKeepLink(ValueError):
    """The record cannot carry a keep link: it has no notice, or its task no owner."""


class LinkRefused(Exception):
    """A link that does not hold; `status` is the page's HTTP status, the message its words."""

    status = 400


class Forged(LinkRefused):
    status = 400


class Expired(LinkRefused):
    status = 410


@dataclass(frozen=True)
class KeepLink:
    """What a valid link says (`read`)."""

    retirement_id: uuid.UUID
    notice_event_id: uuid.UUID
    fingerprint: str
    owner_user_id: str
    owner_email: str
    expires_at: datetime

    @property
    def owner_label(self) -> str:
        """Whom the hold names: the owner, by address, and how they held it."""
        return f"{self.owner_email or self.owner_user_id} (owner, by keep link)"


def fingerprint_digest(fingerprint: dict) -> str:
    """A short digest of a proof fingerprint: equal exactly when every field the
    proof rule compares (rules.proof.FINGERPRINT_FIELDS) is equal."""
    values = [fingerprint.get(name) for name, _ in FINGERPRINT_FIELDS]
    text = json.dumps(values, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def notice_fingerprint(r: Retirement) -> dict:
    """The fingerprint the notice was given for: the one its proof receipt
    recorded (the notice was given only while it matched the sandbox), else -
    a proof by replacement, or a record without a notice proof - the sandbox's now."""
    if r.notice_proof and r.notice_proof != REPLACEMENT:
        receipt = Receipt.objects.filter(pk=r.notice_proof, retirement=r).first()
        recorded = (receipt.payload or {}).get("fingerprint") if receipt is not None else None
        if isinstance(recorded, dict):
            return recorded
    return fingerprint_of(r)


def current_notice_id(r: Retirement) -> uuid.UUID | None:
    """The id of the notice event announcing the record's current notice period."""
    if r.retire_after is None:
        return None
    key = f"notice:{r.pk}:{r.retire_after.isoformat()}"
    return (
        NotificationEvent.objects.filter(type=NotificationType.NOTICE, retirement=r, key=key)
        .values_list("pk", flat=True)
        .first()
    )


def keep_url(
    retirement: Retirement, *, expires_at: datetime, notice_event_id: uuid.UUID | None = None
) -> str:
    """The absolute keep link for the record's current notice, valid until
    `expires_at` (the notice's end). `notice_event_id` defaults to the notice
    event already recorded for the record's `retire_after`. Raises NoKeepLink
    when there is no notice or the task has no owner. Reads the owner from the
    rows `Retirement.objects.with_owners()` joined, when it did."""
    if expires_at.tzinfo is None:
        raise ValueError("expires_at: give a time with its time zone")
    notice_id = notice_event_id or current_notice_id(retirement)
    if notice_id is None:
        raise NoKeepLink("the record has no notice to keep it from")
    issue = retirement.lease.issue if retirement.lease.issue_id else None
    owner = issue.owner() if issue is not None else None
    if owner is None:
        raise NoKeepLink("the record's task has no owner to keep it")
    payload = {
        "r": str(retirement.pk),
        "n": str(notice_id),
        "f": fingerprint_digest(notice_fingerprint(retirement)),
        "o": owner.user_id,
        "m": owner.email,
        "e": int(expires_at.timestamp()),
    }
    token = signing.dumps(payload, salt=SALT, compress=True)
    return absolute(reverse("keep", args=[token]))


def read(token: str, *, now: datetime) -> KeepLink:
    """What a link says, if this console signed it and it has not expired.
    Raises Forged (not ours, or not a link at all) or Expired. Reads no row."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise Forged("This is not a keep link the console sent.")
    try:
        data = signing.loads(token, salt=SALT, max_age=MAX_AGE)
    except signing.SignatureExpired:
        raise Expired("This keep link has expired: the notice it came with is over.") from None
    except (signing.BadSignature, ValueError, UnicodeError):
        raise Forged("This is not a keep link the console sent.") from None
    try:
        link = KeepLink(
            retirement_id=uuid.UUID(data["r"]),
            notice_event_id=uuid.UUID(data["n"]),
            fingerprint=str(data["f"]),
            owner_user_id=str(data["o"]),
            owner_email=str(data.get("m") or ""),
            expires_at=datetime.fromtimestamp(int(data["e"]), tz=UTC),
        )
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        raise Forged("This keep link is malformed.") from None
    if now >= link.expires_at:
        raise Expired("This keep link has expired: the notice it came with is over.")
    return link
