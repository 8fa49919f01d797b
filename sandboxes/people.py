"""People without a shell: an admin creates a user with a role and gives them a
set-password link (docs/architecture.md, operator actions). One audit row each."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from sandboxes import audit
from sandboxes.actions import ActionRefused, _reason, _storable
from sandboxes.roles import ASSIGN_ROLES, ROLES

SMTP = "django.core.mail.backends.smtp.EmailBackend"
LINK_DAYS = settings.PASSWORD_RESET_TIMEOUT // 86400


@dataclass(frozen=True)
class SetPasswordLink:
    """Where the link went: sent by mail, or `url` shown to the admin to hand on."""

    user: object
    url: str
    sent_to: str = ""
    mail_error: str = ""

    @property
    def shown(self) -> bool:
        return not self.sent_to


def mail_configured() -> bool:
    """A backend other than SMTP (console, file, locmem…) or an SMTP host named
    in EMAIL_HOST; otherwise the admin is shown the link to hand on."""
    return settings.EMAIL_BACKEND != SMTP or bool(settings.EMAIL_HOST)


def _require_admin(actor) -> None:
    if not (getattr(actor, "is_authenticated", False) and actor.has_perm(ASSIGN_ROLES)):
        raise PermissionDenied("managing users is not allowed for this account")


def set_password_url(user) -> str:
    """Django's password-reset token for `user`, as a link on CONSOLE_BASE_URL."""
    path = reverse(
        "password-set",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )
    return settings.CONSOLE_BASE_URL.rstrip("/") + path


def deliver_link(user) -> SetPasswordLink:
    """A fresh set-password link for `user`: mailed when it can be, else to be shown."""
    url = set_password_url(user)
    if not (user.email and mail_configured()):
        return SetPasswordLink(user, url)
    body = (
        f"An admin of Paperclip Console gave you the account {user.get_username()}.\n\n"
        f"Choose your password here (the link works once, for {LINK_DAYS} days):\n{url}\n"
    )
    try:
        send_mail("Your Paperclip Console account", body, None, [user.email])
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        return SetPasswordLink(user, url, mail_error=f"{type(exc).__name__}: {exc}"[:300])
    return SetPasswordLink(user, url, sent_to=user.email)


def create_user(*, actor, username: str, email: str, role: str, reason: str) -> SetPasswordLink:
    """A new active user with an unusable password and one console role, and its
    set-password link (mailed when mail is configured and the user has an address)."""
    _require_admin(actor)
    reason = _reason(reason)
    username = _storable((username or "").strip())
    email = _storable((email or "").strip())
    User = get_user_model()
    try:
        User.username_validator(username)
    except ValidationError as exc:
        raise ActionRefused(f"Username: {' '.join(exc.messages)}") from None
    if not username:
        raise ActionRefused("Username: a username is required.")
    if role not in ROLES:
        raise ActionRefused(f"Role: {role!r} is not a role (reviewer, operator or admin).")
    try:
        with transaction.atomic():
            if User.objects.filter(username__iexact=username).exists():
                raise ActionRefused(f"Username: {username} is taken.")
            user = User(username=username, email=email, is_active=True)
            user.set_unusable_password()
            user.save()
            user.groups.add(Group.objects.get(name=ROLES[role]))
            link = deliver_link(user)
            audit.record(
                actor=actor,
                action="user.create",
                obj=user,
                reason=reason,
                after=_told(link, username=username, email=email or None, role=role),
            )
    except IntegrityError:
        raise ActionRefused(f"Username: {username} is taken.") from None
    return link


def send_set_password_link(user_id, *, actor, reason: str) -> SetPasswordLink:
    """A new set-password link for an existing user (a forgotten or never-set password)."""
    _require_admin(actor)
    reason = _reason(reason)
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise ActionRefused("No such user.")
    if not user.is_active:
        raise ActionRefused(f"{user.get_username()} is inactive: a link would not let them in.")
    link = deliver_link(user)
    audit.record(
        actor=actor,
        action="user.password_link",
        obj=user,
        reason=reason,
        after=_told(link, username=user.get_username()),
    )
    return link


def _told(link: SetPasswordLink, **fields) -> dict:
    """The audit row's after: never the link itself, only where it went."""
    return {
        **fields,
        "link": f"sent to {link.sent_to}" if link.sent_to else "shown to the admin",
        **({"mail_error": link.mail_error} if link.mail_error else {}),
    }
