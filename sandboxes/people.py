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
            companies = _inherit_limit(user, actor)
            link = deliver_link(user)
            audit.record(
                actor=actor,
                action="user.create",
                obj=user,
                reason=reason,
                after=_told(
                    link,
                    username=username,
                    email=email or None,
                    role=role,
                    **({"companies": companies} if companies else {}),
                ),
            )
    except IntegrityError:
        raise ActionRefused(f"Username: {username} is taken.") from None
    return link


def _inherit_limit(user, actor) -> list[str]:
    """A company-limited admin's new user is limited to the admin's companies:
    an account made by someone who sees some companies never sees more."""
    from sandboxes.models import CompanyScope, companies_of

    limit = companies_of(actor)
    if limit is None:
        return []
    CompanyScope.objects.bulk_create([CompanyScope(user=user, company_id=c) for c in limit])
    return sorted(str(c) for c in limit)


def send_set_password_link(user_id, *, actor, reason: str) -> SetPasswordLink:
    """A new set-password link for an existing user (a forgotten or never-set password)."""
    _require_admin(actor)
    reason = _reason(reason)
    user = manageable_users(actor).filter(pk=user_id).first()
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


# --- company limits (README, company scope) ---------------------------------------


def company_ids_of(user) -> list[str]:
    """The user's company limit as sorted ids ([]: every company), for the audit row."""
    from sandboxes.models import CompanyScope

    return sorted(
        str(c) for c in CompanyScope.objects.filter(user=user).values_list("company_id", flat=True)
    )


def manageable_users(actor):
    """The users `actor` may manage: everyone for an admin who sees every company;
    for a company-limited admin, only users limited within the admin's own
    companies (anyone else answers 404, like another company's record)."""
    from sandboxes.models import CompanyScope, companies_of

    users = get_user_model().objects.all()
    limit = companies_of(actor)
    if limit is None:
        return users
    outside = CompanyScope.objects.exclude(company_id__in=list(limit)).values("user_id")
    return users.filter(pk__in=CompanyScope.objects.values("user_id")).exclude(pk__in=outside)


def parse_company_ids(values) -> list:
    """Company ids as given (a form's or a command's), each a company the console
    mirrors; refuses naming the field and the value."""
    import uuid

    from sandboxes.models import Company

    ids = []
    for value in values:
        text = str(value).strip()
        try:
            ids.append(uuid.UUID(text))
        except ValueError:
            raise ActionRefused(f"Companies: {text[:80]!r} is not a company id.") from None
    known = set(Company.objects.filter(pk__in=ids).values_list("pk", flat=True))
    unknown = [str(i) for i in ids if i not in known]
    if unknown:
        raise ActionRefused(f"Companies: the console knows no company {unknown[0]}.")
    return sorted(set(ids), key=str)


def set_companies(user_id, *, actor, company_ids, reason: str) -> tuple[list, list]:
    """Limit a user to `company_ids` (empty: every company) and audit it. Only an
    admin who sees every company may; never their own limit. (old, new) ids."""
    from sandboxes.models import CompanyScope, companies_of
    from sandboxes.models.scope import forget_scope

    if actor is not None:  # None: manage.py, whoever runs the server
        _require_admin(actor)
        if companies_of(actor) is not None:
            raise PermissionDenied(
                "an admin limited to some companies cannot change company limits"
            )
    reason = _reason(reason)
    ids = parse_company_ids(company_ids)
    with transaction.atomic():
        user = get_user_model().objects.select_for_update().filter(pk=user_id).first()
        if user is None:
            raise ActionRefused("No such user.")
        if actor is not None and user.pk == actor.pk:
            raise ActionRefused("Companies: you cannot change your own limit; ask another admin.")
        old = company_ids_of(user)
        new = [str(i) for i in ids]
        if old == new:
            raise ActionRefused(f"{user.get_username()} already has this limit; nothing changed.")
        CompanyScope.objects.filter(user=user).delete()
        CompanyScope.objects.bulk_create([CompanyScope(user=user, company_id=i) for i in ids])
        forget_scope(user)
        audit.record(
            actor=actor,
            action="user.companies",
            obj=user,
            reason=reason,
            before={"username": user.get_username(), "companies": old},
            after={"username": user.get_username(), "companies": new},
        )
    return old, new
