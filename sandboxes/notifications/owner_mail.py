"""The admins' action on an environment's owner e-mail (README: Owner e-mail):
one function, audited like a channel's change.

The URL is an Apprise mailto:// or mailtos:// URL without recipients (each
digest goes to the task's owner), judged like a channel's (`addresses`: its
SMTP server must be public unless NOTIFY_ALLOWED_HOSTS lists it), and stored
encrypted, or only the name of an environment variable holding it is kept.
Audit rows and pages show its scheme and host, never the URL.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from sandboxes import audit
from sandboxes.actions import ActionRefused, _note, _require, _storable
from sandboxes.models import Environment, OwnerMail

from . import addresses, secrets
from .channels import _check_env_name
from .delivery import apprise_service
from .owner_digest import recipient_problem

FIELD = "url"


def mail_hint(url: str) -> str:
    """What the console shows of an e-mail URL: scheme and SMTP host, never the
    user, password or query."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{port}/…" if host else f"{parts.scheme}://…"


def snapshot(s: OwnerMail | None) -> dict:
    """What an audit row may show of the setting: never the URL in clear."""
    if s is None:
        return {"url": "", "enabled": False}
    return {
        "url": f"env:{s.url_env}" if s.url_env else (s.url_hint or "encrypted"),
        "enabled": s.enabled,
    }


def check_url(url: str, field: str = FIELD) -> str:
    """The URL to store; ActionRefused naming `field` when it is not an e-mail URL
    Apprise takes, names recipients, or reaches an internal address."""
    url = _storable((url or "").strip())
    if not url:
        return ""
    if len(url) > 2000:
        raise ActionRefused(f"{field}: keep it under 2,000 characters.")
    problem = recipient_problem(url)
    if problem:
        raise ActionRefused(f"{field}: {problem}.")
    try:
        service = apprise_service(url)
        if service is None:
            raise ActionRefused(f"{field}: Apprise does not take this e-mail URL (see its docs).")
        addresses.check_on_save(addresses.apprise_targets(service))
    except addresses.AddressRefused as exc:
        raise ActionRefused(f"{field}: {exc}") from None
    except ValueError as exc:  # from urlsplit: a bad port or IPv6 address
        raise ActionRefused(f"{field}: not a URL the console can send to ({exc}).") from None
    return url


def _check_env_url(url_env: str) -> None:
    """The URL an environment variable holds is judged too when this process has it."""
    value = os.environ.get(url_env, "") if url_env else ""
    if value:
        check_url(value, "url_env")


@transaction.atomic
def update_owner_mail(
    environment_id, *, actor, url: str = "", url_env: str = "", enabled: bool, reason: str = ""
) -> OwnerMail:
    """Set the environment's owner e-mail. A blank `url` keeps the stored one
    (never shown, so never re-typed); turning it on mails the notices given from
    then on, not the environment's past ones."""
    _require(actor, "edit_policy")
    reason = _note(reason)
    env = Environment.objects.select_for_update().get(pk=environment_id)
    current = OwnerMail.objects.filter(environment=env).first()
    before = snapshot(current)
    url = check_url(url)
    url_env = _check_env_name(url_env, "url_env")
    if url and url_env:
        raise ActionRefused(f"{FIELD}: give a URL or an environment variable name, not both.")
    s = current or OwnerMail(environment=env)
    url_changed = False
    if url:
        s.url_encrypted, s.url_env, s.url_hint = secrets.encrypt(url), "", mail_hint(url)
        url_changed = True
    elif url_env and url_env != s.url_env:
        _check_env_url(url_env)
        s.url_encrypted, s.url_env, s.url_hint = "", url_env, ""
        url_changed = True
    if not s.url_encrypted and not s.url_env:
        raise ActionRefused(
            f"{FIELD}: give the SMTP URL (mailto:// or mailtos://) or the name of the "
            "environment variable holding it."
        )
    if enabled and not s.enabled:
        s.enabled_at = timezone.now()
    s.enabled = bool(enabled)
    s.updated_by = actor if getattr(actor, "is_authenticated", False) else None
    after = snapshot(s)
    if url_changed:
        after["url_changed"] = True
    if current is not None and after == before:
        raise ActionRefused("Nothing changed.")
    s.save()
    audit.record(
        actor=actor, action="owner_mail.update", obj=env, reason=reason, before=before, after=after
    )
    return s
