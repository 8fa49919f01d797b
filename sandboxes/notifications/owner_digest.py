"""Owners' digests (README: Owner e-mail): the notices and retirements of an
environment's sandboxes, mailed to each task's owner at most once an hour.

`collect` files every notice and retirement event not yet in a digest into
its owner's digest of the current hour: one row per (environment, owner,
hour), unique in the database, so two workers or two passes file an event
once and form one digest. An event whose owner's digest of this hour is
already sent (or being sent) waits for the next hour's. `send_digest` claims a
due digest like a channel's delivery (pending → sending, fenced), builds its
body at that moment (the countdowns run to the moment of sending) and mails it
through Apprise's mailto:// or mailtos:// URL of the environment, with the
owner as the only recipient; a failure is retried with the deliveries' backoff.
Owners without an e-mail address get nothing: their digest is kept as
`no_email` (`no_owner` for a task no user owns), which the log shows.

`run` (the `notifications sweep` schedule, and after each reconciler pass)
does both: files what is new, queues what is due.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from sandboxes.keep_links import NoKeepLink, keep_url
from sandboxes.models import (
    DigestStatus,
    NotificationEvent,
    NotificationType,
    OwnerDigest,
    OwnerDigestItem,
    OwnerMail,
    Retirement,
    Stage,
)
from sandboxes.models.mirror import ISSUE_PEOPLE
from sandboxes.rules import owner_digest as words
from sandboxes.rules.owner import Owner

from . import addresses, secrets
from .delivery import (
    ERROR_CHARS,
    MAX_ATTEMPTS,
    SENDING_LEASE,
    SendError,
    apprise_service,
    backoff,
    notify_apprise,
)
from .links import absolute

log = logging.getLogger(__name__)

TASK = "sandboxes.notifications.owner_digest.send_digest"
OWNER_TYPES = (NotificationType.NOTICE, NotificationType.RETIRED)
COLLECT_BATCH = 2000
SEND_BATCH = 500
EMAIL_SCHEMES = ("mailto", "mailtos")
# Query arguments that name recipients: the owner is the only one.
RECIPIENT_ARGS = ("to", "cc", "bcc")
WHY = {
    DigestStatus.NO_EMAIL: "owner has no e-mail",
    DigestStatus.NO_OWNER: "task has no owner",
}


class Undeliverable(SendError):
    """A digest that no retry can send (the setting is off, the address is not one)."""


# --- the owner's address in the environment's URL ---------------------------------------


def recipient_problem(url: str) -> str:
    """Why an admin's owner-mail URL cannot be used, in words, or "" when it can:
    an e-mail URL of Apprise's that names no recipient of its own."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in EMAIL_SCHEMES:
        return "an Apprise e-mail URL starts with mailto:// or mailtos://"
    named = [k for k, _ in parse_qsl(parts.query) if k.lower() in RECIPIENT_ARGS]
    if named or parts.path.strip("/"):
        return (
            "leave the recipients out (to=, cc=, bcc= or a path): "
            "each digest goes to the task's owner"
        )
    return ""


def to_owner(url: str, email: str) -> str:
    """The environment's URL with the owner as its one recipient."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() not in RECIPIENT_ARGS]
    query.append(("to", email))
    return urlunsplit(parts._replace(path="", query=urlencode(query)))


def email_service(url: str, email: str):
    """The Apprise e-mail service sending to `email` alone; Undeliverable if the
    URL is not an e-mail URL or Apprise would send anywhere else (it mails its
    own sender when a recipient does not parse)."""
    problem = recipient_problem(url)
    if problem:
        raise Undeliverable(f"owner e-mail URL: {problem}")
    service = apprise_service(to_owner(url, email))
    if service is None:
        raise Undeliverable("Apprise does not recognise the owner e-mail URL")
    targets = [address for _name, address in getattr(service, "targets", [])]
    if [t.lower() for t in targets] != [email.lower()]:
        raise Undeliverable(f"the owner's address {email!r} is not one Apprise can mail")
    return service


# --- filing events into digests ---------------------------------------------------------


def pending_events(limit: int = COLLECT_BATCH) -> list[NotificationEvent]:
    """Notices and retirements in environments whose owner e-mail is on, since
    it was turned on, that no digest lists yet; with each task's people."""
    people = [f"retirement__lease__issue__{path}" for path in ISSUE_PEOPLE]
    return list(
        NotificationEvent.objects.filter(
            type__in=OWNER_TYPES,
            retirement__isnull=False,
            environment__owner_mail__enabled=True,
            created_at__gte=F("environment__owner_mail__enabled_at"),
            owner_digest_item__isnull=True,
        )
        .select_related("retirement__lease__issue", *people)
        .order_by("created_at")[:limit]
    )


def _owner(event: NotificationEvent) -> Owner | None:
    lease = event.retirement.lease  # type: ignore[union-attr]  # filtered: not null
    return lease.issue.owner() if lease.issue_id and lease.issue else None


def collect(now: datetime | None = None) -> int:
    """File every pending event into its owner's digest of this hour. Returns
    how many were filed (the others wait for their owner's next hour)."""
    now = now or timezone.now()
    hour = words.hour_of(now)
    groups: dict[tuple, list[NotificationEvent]] = defaultdict(list)
    people: dict[tuple, Owner | None] = {}
    for event in pending_events():
        owner = _owner(event)
        key = (event.environment_id, owner.user_id if owner else "")
        groups[key].append(event)
        people.setdefault(key, owner)
    filed = 0
    for (environment_id, _user), events in groups.items():
        filed += _file(environment_id, people[(environment_id, _user)], events, hour, now)
    return filed


def _status_of(owner: Owner | None, email: str) -> DigestStatus:
    if owner is None:
        return DigestStatus.NO_OWNER
    return DigestStatus.PENDING if email else DigestStatus.NO_EMAIL


def _digest_for(environment_id, owner: Owner | None, email: str, hour, now) -> OwnerDigest:
    """The owner's digest new events go into, locked: the one still waiting for
    its first send, whatever hour formed it (a retry after an SMTP outage, a
    digest held back, takes them: the owner gets one mail, not several), else
    this hour's, made if need be (once: the unique hour)."""
    user_id = owner.user_id if owner else ""
    mine = OwnerDigest.objects.select_for_update().filter(
        environment_id=environment_id, owner_user_id=user_id
    )
    waiting = mine.filter(status=DigestStatus.PENDING).order_by("hour").first()
    if waiting is not None:
        return waiting
    status = _status_of(owner, email)
    OwnerDigest.objects.bulk_create(
        [
            OwnerDigest(
                environment_id=environment_id,
                owner_user_id=user_id,
                owner_name=owner.name if owner else "",
                owner_email=email,
                hour=hour,
                status=status,
                next_attempt_at=now if status == DigestStatus.PENDING else None,
                last_error=WHY.get(status, ""),
            )
        ],
        ignore_conflicts=True,
    )
    return mine.get(hour=hour)


def _file(environment_id, owner: Owner | None, events, hour, now) -> int:
    email = (owner.email or "").strip() if owner else ""
    with transaction.atomic():
        digest = _digest_for(environment_id, owner, email, hour, now)
        if digest.status not in (DigestStatus.PENDING, *WHY):
            return 0  # this hour's mail is sent or going: the next hour's lists them
        items = [
            OwnerDigestItem(digest=digest, event=e, retirement_id=e.retirement_id) for e in events
        ]
        OwnerDigestItem.objects.bulk_create(
            items,
            ignore_conflicts=True,  # an event another worker filed first stays in its digest
        )
    return len(events)


# --- what a digest says ------------------------------------------------------------------


def keep_link(r: Retirement, notice: NotificationEvent, retire_after: datetime) -> str:
    """The notice line's link that keeps the sandbox (docs/rules.md, kept by the
    owner), for this notice and valid until it ends; "" when the record cannot
    carry one (its task has no owner)."""
    try:
        return keep_url(r, expires_at=retire_after, notice_event_id=notice.pk)
    except NoKeepLink:
        return ""


def _notice(r: Retirement, event: NotificationEvent, now) -> words.Notice:
    at = parse_datetime(event.payload.get("retire_after") or "") or r.retire_after or now
    stands = r.stage == Stage.NOTICED and r.retire_after == at
    link = keep_link(r, event, at) if stands and at > now else ""
    return words.Notice(retire_after=at, stands=stands, stage=r.stage, keep_url=link)


def _retired(event: NotificationEvent) -> words.Retired:
    files = tuple(
        words.ExportedFile(f["path"], int(f["size"]), f.get("attachment_url") or "")
        for f in event.payload.get("exported") or []
    )
    return words.Retired(exported=files, deleted=tuple(event.payload.get("deleted") or []))


def entries_of(digest: OwnerDigest, now: datetime) -> list[words.Entry]:
    """One entry per sandbox the digest lists, in the order they were announced:
    the retirement if it is listed, else its latest notice as of `now`."""
    people = [f"retirement__lease__issue__{path}" for path in ISSUE_PEOPLE]
    items = (
        digest.items.select_related("event", "retirement__lease__issue", *people)
        .order_by("event__created_at")
        .all()
    )
    slots: dict = {}
    for item in items:
        slot = slots.setdefault(item.retirement_id, {"r": item.retirement})
        slot["retired" if item.event.type == NotificationType.RETIRED else "notice"] = item.event
    entries = []
    for slot in slots.values():
        r, notice, retired = slot["r"], slot.get("notice"), slot.get("retired")
        payload = (retired or notice).payload
        task = payload.get("task") or {}
        entries.append(
            words.Entry(
                task_key=task.get("key") or "",
                task_title=task.get("title") or "",
                sandbox=f"{r.provider}:{r.provider_lease_id}",
                record_url=payload.get("record_url")
                or absolute(reverse("sandbox-detail", args=[r.pk])),
                task_url=task.get("url") or "",
                notice=_notice(r, notice, now) if notice is not None else None,
                retired=_retired(retired) if retired is not None else None,
            )
        )
    return entries


# --- sending -----------------------------------------------------------------------------


def held_until(digest: OwnerDigest, now: datetime) -> datetime | None:
    """When the digest may go, if not now: the one place the send decides
    whether an owner may be mailed at this moment. None: now. Owners are
    mailed only inside their environment's retirement window (docs/rules.md,
    the retirement window), as channel notices are; outside it the digest
    waits for the opening."""
    window = digest.environment.window
    if window is None or window.is_open(now):
        return None
    return window.next_opening(now)


def _claim(digest_id, now) -> bool:
    return bool(
        OwnerDigest.objects.due(now)
        .filter(pk=digest_id)
        .update(
            status=DigestStatus.SENDING,
            sending_until=now + timedelta(seconds=SENDING_LEASE),
            updated_at=now,
        )
    )


def _send(d: OwnerDigest, now: datetime) -> None:
    setting = OwnerMail.objects.filter(environment_id=d.environment_id).first()
    if setting is None or not setting.enabled:
        raise Undeliverable("owner e-mail is off for this environment")
    entries = entries_of(d, now)
    if not entries:
        raise Undeliverable("the digest lists nothing")
    subject, body = words.compose(
        entries, environment=d.environment.name, owner_name=d.owner_name, now=now
    )
    url = secrets.resolve(setting.url_encrypted, setting.url_env, "owner e-mail URL")
    notify_apprise(email_service(url, d.owner_email), subject, body, text=True)


def send_digest(digest_id, *, now: datetime | None = None) -> str:
    """Send one digest if it is due (django-q2 task). Returns its new status."""
    now = now or timezone.now()
    if not _claim(digest_id, now):
        row = OwnerDigest.objects.filter(pk=digest_id).values("status").first()
        return row["status"] if row else "missing"
    d = OwnerDigest.objects.select_related("environment").get(pk=digest_id)
    fence = Q(pk=d.pk, status=DigestStatus.SENDING, sending_until=d.sending_until)
    wait = held_until(d, now)
    if wait is not None:
        OwnerDigest.objects.filter(fence).update(
            status=DigestStatus.PENDING, next_attempt_at=wait, sending_until=None
        )
        return DigestStatus.PENDING
    try:
        _send(d, now)
    except Exception as exc:
        return _failed(d, fence, exc)
    done = timezone.now()
    OwnerDigest.objects.filter(fence).update(
        status=DigestStatus.DELIVERED,
        attempts=F("attempts") + 1,
        last_error="",
        last_attempt_at=done,
        delivered_at=done,
        next_attempt_at=None,
        sending_until=None,
        updated_at=done,
    )
    return DigestStatus.DELIVERED


def _failed(d: OwnerDigest, fence: Q, exc: Exception) -> str:
    refused = isinstance(exc, addresses.AddressRefused)
    error = (f"refused: {exc}" if refused else str(exc))[:ERROR_CHARS] or type(exc).__name__
    attempts = d.attempts + 1
    final = attempts >= MAX_ATTEMPTS or refused or isinstance(exc, Undeliverable)
    done = timezone.now()
    OwnerDigest.objects.filter(fence).update(
        status=DigestStatus.FAILED if final else DigestStatus.PENDING,
        attempts=F("attempts") + 1,
        last_error=error,
        last_attempt_at=done,
        next_attempt_at=None if final else done + backoff(attempts),
        sending_until=None,
        updated_at=done,
    )
    log.warning(
        "owner digest %s to %s failed (attempt %s%s): %s",
        d.pk,
        d.owner_email,
        attempts,
        ", giving up" if final else "",
        error,
    )
    return DigestStatus.FAILED if final else DigestStatus.PENDING


# --- the schedule --------------------------------------------------------------------------


def due_ids(now: datetime | None = None, limit: int = SEND_BATCH) -> list:
    now = now or timezone.now()
    return list(
        OwnerDigest.objects.due(now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )


def enqueue(digest_ids) -> None:
    """One django-q2 task per digest; a broker that is down loses nothing (the
    next sweep queues it again)."""
    from django_q.tasks import async_task

    for pk in digest_ids:
        try:
            async_task(TASK, str(pk), task_name=f"owner digest {pk}", group="owner-mail")
        except Exception as exc:
            log.warning("could not queue owner digest %s (the sweep will): %s", pk, exc)


def run(now: datetime | None = None) -> dict:
    """File what is new, queue what is due (the sweep, and after each pass)."""
    filed = collect(now)
    ids = due_ids(now)
    enqueue(ids)
    return {"filed": filed, "queued": len(ids)}


def send_due(now: datetime | None = None) -> dict:
    """File and send every due digest here, one after the other (tests, `make run`)."""
    collect(now)
    counts: dict = {}
    for pk in due_ids(now):
        status = send_digest(pk, now=now)
        counts[status] = counts.get(status, 0) + 1
    return counts
