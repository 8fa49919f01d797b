"""Admin actions on notification channels: one function each, audited.

URLs and secrets are encrypted before they are stored (or only the name of an
environment variable is kept); audit rows record what changed, never a clear
value ("url": "changed"). A webhook's signing secret is returned once, by
create and rotate, and never shown again.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from sandboxes import audit
from sandboxes.actions import ActionRefused, _note, _require, _storable
from sandboxes.models import (
    ChannelKind,
    Environment,
    NotificationChannel,
    NotificationDelivery,
    NotificationType,
)

from . import addresses, secrets
from .delivery import apprise_service, deliver, url_hint

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
EVENT_TYPES = [t for t in NotificationType.values if t != NotificationType.TEST]


def snapshot(c: NotificationChannel) -> dict:
    """What an audit row may show of a channel: never a URL or secret in clear."""
    return {
        "name": c.name,
        "kind": c.kind,
        "url": f"env:{c.url_env}" if c.url_env else (c.url_hint or "encrypted"),
        "secret": (
            f"env:{c.secret_env}" if c.secret_env else ("encrypted" if c.secret_encrypted else "")
        ),
        "events": list(c.events or []),
        "enabled": c.enabled,
    }


def _check_env_name(name: str, field: str) -> str:
    name = (name or "").strip()
    if name and not ENV_NAME.match(name):
        raise ActionRefused(f"{field}: an environment variable name (A-Z, 0-9, _).")
    return name


def _check_url(kind: str, url: str, field: str = "url") -> str:
    """The URL to store; refused when it is malformed or reaches an internal
    address (`addresses`, README: Notifications)."""
    url = _storable((url or "").strip())
    if not url:
        return ""
    if len(url) > 2000:
        raise ActionRefused(f"{field}: keep it under 2,000 characters.")
    targets: Sequence[tuple[str, int | None]]  # (host, port); Apprise may name no port
    try:
        if kind == ChannelKind.WEBHOOK:
            if not re.match(r"^https?://[^/\s]+", url):
                raise ActionRefused(f"{field}: a webhook URL starts with https:// (or http://).")
            targets = addresses.webhook_targets(url)
        else:
            service = apprise_service(url)
            if service is None:
                raise ActionRefused(
                    f"{field}: Apprise does not recognise this URL (see its URL list)."
                )
            targets = addresses.apprise_targets(service)
        addresses.check_on_save(targets)
    except addresses.AddressRefused as exc:
        raise ActionRefused(f"{field}: {exc}") from None
    except ValueError as exc:  # from urlsplit: a bad port or IPv6 address
        raise ActionRefused(f"{field}: not a URL the console can send to ({exc}).") from None
    return url


def _check_env_url(kind: str, url_env: str) -> None:
    """The URL an environment variable holds is judged too when it is set here
    (the web server); every send judges it again where it is read."""
    value = os.environ.get(url_env, "") if url_env else ""
    if value:
        _check_url(kind, value, "url_env")


def _check_events(events) -> list[str]:
    events = list(dict.fromkeys(events or []))
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise ActionRefused(f"events: unknown event types {', '.join(unknown)}.")
    return events


@transaction.atomic
def create_channel(
    environment_id,
    *,
    actor,
    name: str,
    kind: str,
    url: str = "",
    url_env: str = "",
    secret_env: str = "",
    events=(),
    reason: str = "",
) -> tuple[NotificationChannel, str]:
    """Returns (channel, secret shown once: the new webhook secret, or "")."""
    _require(actor, "edit_policy")
    reason = _note(reason)
    env = Environment.objects.get(pk=environment_id)
    name = _storable((name or "").strip())
    if not name:
        raise ActionRefused("name: give the channel a name.")
    if kind not in ChannelKind.values:
        raise ActionRefused(f"kind: unknown channel kind {kind!r}.")
    url = _check_url(kind, url)
    url_env = _check_env_name(url_env, "url_env")
    if bool(url) == bool(url_env):
        raise ActionRefused("url: give a URL or the name of the environment variable holding it.")
    _check_env_url(kind, url_env)
    secret_env = _check_env_name(secret_env, "secret_env")
    if NotificationChannel.objects.filter(environment=env, name=name).exists():
        raise ActionRefused(f"name: {env.name} already has a channel named {name!r}.")
    shown = ""
    c = NotificationChannel(
        environment=env,
        name=name,
        kind=kind,
        url_encrypted=secrets.encrypt(url) if url else "",
        url_env=url_env,
        url_hint=url_hint(url) if url else "",
        events=_check_events(events),
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    if kind == ChannelKind.WEBHOOK:
        if secret_env:
            c.secret_env = secret_env
        else:
            shown = secrets.new_webhook_secret()
            c.secret_encrypted = secrets.encrypt(shown)
        c.secret_set_at = timezone.now()
    c.save()
    audit.record(actor=actor, action="channel.create", obj=c, reason=reason, after=snapshot(c))
    return c, shown


def _locked(channel_id) -> NotificationChannel:
    try:
        return NotificationChannel.objects.select_for_update().get(pk=channel_id)
    except NotificationChannel.DoesNotExist:
        raise ActionRefused("No such channel.") from None


@transaction.atomic
def update_channel(
    channel_id,
    *,
    actor,
    name: str,
    url: str = "",
    url_env: str = "",
    secret_env: str = "",
    events=(),
    enabled: bool = True,
    reason: str = "",
) -> NotificationChannel:
    """A blank `url` keeps the stored one (it is never shown, so never re-typed)."""
    _require(actor, "edit_policy")
    reason = _note(reason)
    c = _locked(channel_id)
    before = snapshot(c)
    name = _storable((name or "").strip())
    if not name:
        raise ActionRefused("name: give the channel a name.")
    if (
        name != c.name
        and NotificationChannel.objects.filter(environment_id=c.environment_id, name=name).exists()
    ):
        raise ActionRefused(f"name: this environment already has a channel named {name!r}.")
    c.name = name
    url = _check_url(c.kind, url)
    url_env = _check_env_name(url_env, "url_env")
    if url and url_env:
        raise ActionRefused("url: give a URL or an environment variable name, not both.")
    url_changed = False
    if url:
        c.url_encrypted, c.url_env, c.url_hint = secrets.encrypt(url), "", url_hint(url)
        url_changed = True
    elif url_env and url_env != c.url_env:
        _check_env_url(c.kind, url_env)
        c.url_encrypted, c.url_env, c.url_hint = "", url_env, ""
        url_changed = True
    if c.kind == ChannelKind.WEBHOOK:
        secret_env = _check_env_name(secret_env, "secret_env")
        if secret_env and secret_env != c.secret_env:
            c.secret_env, c.secret_encrypted, c.secret_set_at = secret_env, "", timezone.now()
    c.events = _check_events(events)
    c.enabled = bool(enabled)
    after = snapshot(c)
    if url_changed:
        after["url_changed"] = True
    if after == before:
        raise ActionRefused("Nothing changed.")
    c.save()
    audit.record(
        actor=actor, action="channel.update", obj=c, reason=reason, before=before, after=after
    )
    return c


@transaction.atomic
def rotate_secret(channel_id, *, actor, reason: str = "") -> tuple[NotificationChannel, str]:
    """A new signing secret, returned once; the old one stops verifying at once,
    so the admin says why (a reason is required)."""
    _require(actor, "edit_policy")
    reason = _note(reason)
    if not reason:
        raise ActionRefused("Reason: a reason is required to rotate the signing secret.")
    c = _locked(channel_id)
    if c.kind != ChannelKind.WEBHOOK:
        raise ActionRefused("Only webhook channels have a signing secret.")
    before = snapshot(c)
    shown = secrets.new_webhook_secret()
    c.secret_encrypted, c.secret_env, c.secret_set_at = secrets.encrypt(shown), "", timezone.now()
    c.save()
    audit.record(
        actor=actor,
        action="channel.rotate_secret",
        obj=c,
        reason=reason,
        before=before,
        after={**snapshot(c), "secret_rotated": True},
    )
    return c, shown


@transaction.atomic
def delete_channel(channel_id, *, actor, reason: str) -> None:
    _require(actor, "edit_policy")
    reason = _note(reason)
    if not reason:
        raise ActionRefused("A reason is required.")
    c = _locked(channel_id)
    before = snapshot(c)
    audit.record(actor=actor, action="channel.delete", obj=c, reason=reason, before=before)
    c.delete()


def send_test(channel_id, *, actor) -> NotificationDelivery:
    """Send a test message now, in this request, and return its logged delivery."""
    from .events import absolute, emit

    _require(actor, "edit_policy")
    with transaction.atomic():
        c = _locked(channel_id)
        event = emit(
            NotificationType.TEST,
            key=f"test:{c.pk}:{uuid.uuid4().hex}",
            environment=c.environment,
            channels=[c],
            queue=False,  # sent below, in this request
            data={
                "record_url": absolute("/environments/"),
                "sandbox": {"provider": c.environment.provider, "id": None},
                "task": {"id": None, "key": None, "title": None},
                "kind": None,
            },
        )
        if event is None:
            raise ActionRefused("The test notification could not be recorded; see the logs.")
        delivery = NotificationDelivery.objects.get(event=event, channel=c)
        audit.record(
            actor=actor,
            action="channel.test",
            obj=c,
            reason="send test",
            after={"delivery": str(delivery.pk)},
        )
    deliver(delivery.pk, force=True)
    delivery.refresh_from_db()
    return delivery
