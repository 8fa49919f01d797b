"""Sending deliveries: django-q2 tasks, retried with backoff, logged per channel.

A delivery is claimed with a fenced status change (pending → sending, with a
`sending_until` deadline) so two workers never send it at once; a worker that
dies while sending leaves it to be retried after the deadline (the
`webhook-id` header stays the same, so a receiver can drop the duplicate).

Failures are recorded (attempts, a short error, the response code; never the
response body) and retried: 30 s, doubling, capped at 1 h, at most
MAX_ATTEMPTS times; a host `addresses` refuses is not retried. Nothing here
runs inside the reconciler's transactions: `emit` queues the task after the
commit, and the `notifications sweep` schedule (setup_schedules,
`tasks.sweep`) sends whatever is due.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import apprise
import httpx
from django.db.models import F, Q
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from sandboxes.models import (
    ChannelKind,
    DeliveryStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationType,
)

from . import addresses, secrets

log = logging.getLogger(__name__)

TASK = "sandboxes.notifications.delivery.deliver"
MAX_ATTEMPTS = 8
BACKOFF_FIRST = 30
BACKOFF_CAP = 60 * 60
SEND_SECONDS = 10  # per request (connect and read)
SENDING_LEASE = 120  # a claim on a delivery outlives one send with margin
SWEEP_BATCH = 500
ERROR_CHARS = 300  # a short error: what failed, never what a receiver answered


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** max(0, attempts - 1)))


@dataclass
class Outcome:
    ok: bool
    response_code: int | None = None
    error: str = ""


class SendError(Exception):
    def __init__(self, message: str, response_code: int | None = None):
        super().__init__(message)
        self.response_code = response_code


def enqueue(delivery_ids) -> None:
    """Queue one django-q2 task per delivery (called after the commit). A broker
    that is down loses nothing: the sweep sends whatever is due."""
    from django_q.tasks import async_task

    for pk in delivery_ids:
        try:
            async_task(TASK, str(pk), task_name=f"notify {pk}", group="notifications")
        except Exception as exc:
            log.warning("could not queue delivery %s (the sweep will send it): %s", pk, exc)


# --- transports ---------------------------------------------------------------------------


def message_text(payload: dict) -> tuple[str, str]:
    """Title and body of a chat message: task key, sandbox, environment, kind, link."""
    env = (payload.get("environment") or {}).get("name") or "all environments"
    task = (payload.get("task") or {}).get("key") or (payload.get("task") or {}).get("id")
    sandbox = (payload.get("sandbox") or {}).get("id")
    what = payload.get("title") or payload.get("type")
    if sandbox:
        title = f"[{env}] sandbox {sandbox} {what}" + (f" ({task})" if task else "")
    else:
        title = f"[{env}] {what}"
    lines = []
    for label, value in (
        ("Task", task),
        ("Sandbox", f"{payload['sandbox']['provider']}:{sandbox}" if sandbox else None),
        ("Environment", env),
        ("Kind", payload.get("kind")),
        ("Retire after", payload.get("retire_after")),
        ("Proof", payload.get("proof")),
        ("Attempts", payload.get("attempts")),
        ("Last error", payload.get("last_error")),
        ("Last pass finished", payload.get("last_pass_finished_at")),
    ):
        if value not in (None, ""):
            lines.append(f"{label}: {value}")
    for hold in payload.get("hold_explanations") or []:
        if isinstance(hold, dict) and hold.get("explanation"):
            lines.append(f"Hold: {hold['explanation']}")
    exported = payload.get("exported") or []
    if exported:
        lines.append(f"Exported to the task: {len(exported)} file(s)")
        lines += [
            f"  {f['path']} ({f['size']} bytes) {f.get('attachment_url') or ''}"
            for f in exported[:20]
        ]
    if payload.get("deleted"):
        lines.append(f"Deleted since the last save: {', '.join(payload['deleted'][:20])}")
    if payload.get("record_url"):
        lines.append(f"Record: {payload['record_url']}")
    if payload.get("keep_url"):
        # A notice's owner link (docs/rules.md, kept by the owner): one per sandbox.
        lines.append(f"Keep it for 7 days (the owner, no login): {payload['keep_url']}")
    return title, "\n".join(lines)


_CODE = re.compile(r"error=(\d{3})\b")


def answer_error(code: int) -> str:
    """What the log keeps of a receiver's non-2xx answer: its status, never its
    body (a body can be whatever an internal service answered)."""
    return f"HTTP {code}: redirect not followed" if 300 <= code < 400 else f"HTTP {code}"


def apprise_service(url: str):
    """The Apprise service for a URL, or None if Apprise does not know it.
    Redirects are off even when the URL asks for them: a redirect could lead
    to an address the channel's own host was judged not to be."""
    service = apprise.Apprise.instantiate(url, asset=apprise.AppriseAsset(http_redirects=False))
    if service is not None:
        service.redirects = False
    return service


def send_apprise(url: str, payload: dict) -> Outcome:
    title, body = message_text(payload)
    service = apprise_service(url)
    if service is None:
        raise SendError("Apprise does not recognise this URL")
    return notify_apprise(service, title, body)


def notify_apprise(service, title: str, body: str, *, text: bool = False) -> Outcome:
    """Send through one Apprise service once the hosts it connects to are judged
    (`addresses`); SendError says why a send failed, never what a server answered
    beyond its status. `text`: a plain-text body (an owner's digest)."""
    try:
        addresses.check_on_send(addresses.apprise_targets(service))
    except OSError as exc:
        raise SendError(str(exc)) from None
    apobj = apprise.Apprise()
    apobj.add(service)
    fmt = apprise.NotifyFormat.TEXT if text else None
    with apprise.LogCapture(level=logging.INFO) as captured:
        ok = apobj.notify(title=title, body=body, body_format=fmt)
    logs = captured.getvalue().strip()
    codes = _CODE.findall(logs)
    code = int(codes[-1]) if codes else None
    if not ok:
        if code is not None:
            raise SendError(answer_error(code), code)
        raise SendError(logs.splitlines()[-1] if logs else "Apprise reported a failed send")
    return Outcome(True, code)


def webhook_body(payload: dict) -> str:
    """Standard Webhooks' recommended shape: {type, timestamp, data}."""
    return json.dumps(
        {"type": payload.get("type"), "timestamp": payload.get("occurred_at"), "data": payload},
        separators=(",", ":"),
        sort_keys=True,
    )


def sign_headers(secret: str, msg_id: str, body: str, at: datetime) -> dict:
    """webhook-id, webhook-timestamp, webhook-signature (v1, HMAC-SHA256), signed
    by the `standardwebhooks` reference implementation."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
        "content-type": "application/json",
        "user-agent": "paperclip-console-webhooks/1",
    }


def send_webhook(url: str, secret: str, msg_id: str, payload: dict) -> Outcome:
    body = webhook_body(payload)
    headers = sign_headers(secret, msg_id, body, timezone.now())
    try:
        # No redirects: the signed body goes only to the host the admin configured.
        with addresses.guarded_client(SEND_SECONDS) as client:
            response = client.post(url, content=body.encode(), headers=headers)
    except httpx.HTTPError as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise SendError(answer_error(response.status_code), response.status_code)
    return Outcome(True, response.status_code)


def send(channel: NotificationChannel, msg_id: str, payload: dict) -> Outcome:
    url = secrets.resolve(channel.url_encrypted, channel.url_env, "channel URL")
    if channel.kind == ChannelKind.WEBHOOK:
        secret = secrets.resolve(channel.secret_encrypted, channel.secret_env, "signing secret")
        return send_webhook(url, secret, msg_id, payload)
    return send_apprise(url, payload)


def url_hint(url: str) -> str:
    """What the console shows of a URL: scheme and host, never path or credentials.
    Apprise URLs like slack://TokenA/TokenB carry secrets in the host: scheme only."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https", "json", "jsons", "ntfy", "ntfys") and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}/…"
    return f"{parts.scheme}://…" if parts.scheme else "…"


# --- the tasks ----------------------------------------------------------------------------


def _claim(delivery_id, now) -> bool:
    due = Q(status=DeliveryStatus.PENDING) & (
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    )
    stuck = Q(status=DeliveryStatus.SENDING, sending_until__lte=now)
    return bool(
        NotificationDelivery.objects.filter(due | stuck, pk=delivery_id).update(
            status=DeliveryStatus.SENDING,
            sending_until=now + timedelta(seconds=SENDING_LEASE),
            updated_at=now,
        )
    )


def _waits_for_window(d: NotificationDelivery, fence: Q, now) -> bool:
    """An owner's notice is sent only inside its environment's retirement window
    (docs/rules.md, the retirement window): one due outside it (a retry) is put
    back, uncounted, until the opening. False when it may go now."""
    env = d.event.environment if d.event.type == NotificationType.NOTICE else None
    window = env.window if env is not None else None
    if window is None or window.is_open(now):
        return False
    NotificationDelivery.objects.filter(fence).update(
        status=DeliveryStatus.PENDING,
        next_attempt_at=window.next_opening(now),
        sending_until=None,
        updated_at=now,
    )
    return True


def deliver(delivery_id, *, force: bool = False, now=None) -> str:
    """Send one delivery if it is due (django-q2 task). Returns its new status.
    `force` sends a pending delivery before its retry time (send test)."""
    now = now or timezone.now()
    if force:
        NotificationDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING).update(
            next_attempt_at=now
        )
    if not _claim(delivery_id, now):
        row = NotificationDelivery.objects.filter(pk=delivery_id).values("status").first()
        return row["status"] if row else "missing"
    d = NotificationDelivery.objects.select_related("event", "channel").get(pk=delivery_id)
    fence = Q(pk=d.pk, status=DeliveryStatus.SENDING, sending_until=d.sending_until)
    if _waits_for_window(d, fence, now):
        return DeliveryStatus.PENDING
    try:
        if not d.channel.enabled:
            raise SendError("the channel is disabled")
        outcome = send(d.channel, f"msg_{d.pk.hex}", d.event.payload)
    except Exception as exc:
        code = getattr(exc, "response_code", None)
        refused = isinstance(exc, addresses.AddressRefused)
        error = (f"refused: {exc}" if refused else str(exc))[:ERROR_CHARS] or type(exc).__name__
        attempts = d.attempts + 1
        # A refused address stays refused until NOTIFY_ALLOWED_HOSTS changes:
        # no retry, like a disabled channel.
        final = attempts >= MAX_ATTEMPTS or not d.channel.enabled or refused
        done = timezone.now()
        NotificationDelivery.objects.filter(fence).update(
            status=DeliveryStatus.FAILED if final else DeliveryStatus.PENDING,
            attempts=F("attempts") + 1,
            last_error=error,
            response_code=code,
            last_attempt_at=done,
            next_attempt_at=None if final else done + backoff(attempts),
            sending_until=None,
            updated_at=done,
        )
        log.warning(
            "notification %s to channel %s failed (attempt %s%s): %s",
            d.event.type,
            d.channel.name,
            attempts,
            ", giving up" if final else "",
            error,
        )
        return DeliveryStatus.FAILED if final else DeliveryStatus.PENDING
    done = timezone.now()
    NotificationDelivery.objects.filter(fence).update(
        status=DeliveryStatus.DELIVERED,
        attempts=F("attempts") + 1,
        last_error="",
        response_code=outcome.response_code,
        last_attempt_at=done,
        delivered_at=done,
        next_attempt_at=None,
        sending_until=None,
        updated_at=done,
    )
    return DeliveryStatus.DELIVERED


def due_ids(now=None, limit: int = SWEEP_BATCH) -> list:
    now = now or timezone.now()
    due = Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.SENDING, sending_until__lte=now
    )
    return list(
        NotificationDelivery.objects.filter(due)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )


def send_due(now=None) -> dict:
    """Send every due delivery here, one after the other (tests, `make run`)."""
    counts: dict = {}
    for pk in due_ids(now):
        status = deliver(pk, now=now)
        counts[status] = counts.get(status, 0) + 1
    return counts
