"""Every URL the console serves, classified. The tests cross-check this registry
against the URLconf, so a new URL that is not listed here fails the suite until
someone says what it is and, for an action, who may use it."""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.urls import URLPattern, URLResolver, get_resolver, reverse

OPERATORS_AND_ADMINS = frozenset({"operator", "admin"})
ADMINS_ONLY = frozenset({"admin"})


@dataclass(frozen=True)
class Action:
    """A console POST that changes state: session login, CSRF, a permission, one audit row."""

    name: str
    roles: frozenset  # roles allowed; everyone else gets 403 (anonymous: the login page)
    audit: str  # the audit action its success writes
    target: str | None  # the world object the URL names
    data: Callable[[dict], dict]  # a valid form for the world
    ok_status: int  # the answer to a successful plain (non-htmx) POST
    # False when a refusal answers the same status (a redirect with a message).
    status_tells: bool = True
    # Row-count deltas a success may make besides its one audit row.
    creates: dict = field(default_factory=dict)
    # Fields of the target row a success may change.
    may_change: frozenset = frozenset()
    # The world object the URL names when it is not the row that changes
    # (a create under an environment, a test send, a delete).
    url_target: str | None = None

    def url(self, world) -> str:
        target = self.url_target or self.target
        if target is None:
            return reverse(self.name)
        return reverse(self.name, kwargs={"pk": world[target].pk})

    def row(self, world):
        return world[self.target] if self.target else None


def _reason(world):
    return {"reason": "security test"}


def _hold(world):
    from tests.factories import hold_until

    return {"reason": "security test", "until": hold_until().strftime("%Y-%m-%dT%H:%M")}


def _policy(world):
    env = world["environment"]
    data = {
        "retirement_mode": "manual",
        "warm_retention_hours": "48",
        "max_retirements_per_pass": "10",
        "workspace_root": "work",
        "reason": "security test",
    }
    form = {f"{env.pk}-{k}": v for k, v in data.items()}
    # A policy change is saved once its preview is confirmed (issue 17).
    from sandboxes.views.admin_pages import confirmation_for

    return {**form, "confirm": confirmation_for(env, form)}


RETIREMENT_FIELDS = frozenset({"next_attempt_at", "updated_at"})
HOLD_FIELDS = frozenset(
    {
        "operator_hold_reason",
        "operator_hold_by",
        "operator_hold_at",
        "operator_hold_until",
        "stage",
        "holds",
        "hold_reasons",
        "updated_at",
    }
)

ACTIONS = [
    Action(
        "sandbox-approve",
        OPERATORS_AND_ADMINS,
        "retirement.approve",
        "awaiting",
        _reason,
        302,
        creates={"sandboxes.Receipt": 1},
        may_change=RETIREMENT_FIELDS,
    ),
    Action(
        "sandbox-retry",
        OPERATORS_AND_ADMINS,
        "retirement.retry",
        "awaiting",
        _reason,
        302,
        may_change=RETIREMENT_FIELDS,
    ),
    Action(
        "sandbox-hold",
        OPERATORS_AND_ADMINS,
        "retirement.hold",
        "awaiting",
        _hold,
        302,
        may_change=HOLD_FIELDS,
    ),
    Action(
        "sandbox-release-hold",
        OPERATORS_AND_ADMINS,
        "retirement.release_hold",
        "held",
        _reason,
        302,
        may_change=HOLD_FIELDS | {"next_attempt_at"},
    ),
    Action(
        "sandbox-attest",
        ADMINS_ONLY,
        "retirement.attest",
        "awaiting",
        lambda w: {"typed_sandbox_id": w["awaiting"].provider_lease_id, "reason": "scratch"},
        302,
        creates={"sandboxes.Receipt": 1},
        may_change=RETIREMENT_FIELDS,
    ),
    Action(
        "sandbox-bulk",
        OPERATORS_AND_ADMINS,
        "retirement.hold",
        None,
        lambda w: {"action": "hold", "ids": [str(w["awaiting"].pk)], **_hold(w)},
        302,
        status_tells=False,
    ),
    Action(
        "approvals-bulk",
        OPERATORS_AND_ADMINS,
        "retirement.approve",
        None,
        lambda w: {"ids": [str(w["awaiting"].pk)], "reason": "weekly cleanup"},
        302,
        status_tells=False,
        creates={"sandboxes.Receipt": 1},
    ),
    Action(
        "environment-policy",
        ADMINS_ONLY,
        "environment.edit_policy",
        "environment",
        _policy,
        302,
        may_change=frozenset(
            {
                "retirement_mode",
                "warm_retention",
                "max_retirements_per_pass",
                "workspace_root",
                "notice_period",
                "updated_at",
            }
        ),
    ),
    Action(
        "token-create",
        ADMINS_ONLY,
        "token.create",
        None,
        lambda w: {"name": "new-bot", "scope": "operator", "reason": "cron"},
        200,
        creates={"sandboxes.ApiToken": 1},
    ),
    Action(
        "token-revoke",
        ADMINS_ONLY,
        "token.revoke",
        "token",
        lambda w: {"reason": "leaked"},
        302,
        status_tells=False,
        may_change=frozenset({"revoked_at"}),
    ),
]
CHANNEL_ACTIONS = [
    Action(
        "channel-create",
        ADMINS_ONLY,
        "channel.create",
        None,
        lambda w: {"name": "ops-hook", "kind": "webhook", "url": "https://hooks.example.com/x"},
        200,  # the page that shows the new signing secret once
        creates={"sandboxes.NotificationChannel": 1},
        url_target="environment",
    ),
    Action(
        "channel-update",
        ADMINS_ONLY,
        "channel.update",
        "channel",
        lambda w: {"name": "renamed", "reason": "security test"},
        302,
        may_change=frozenset({"name", "enabled", "events", "updated_at"}),
    ),
    Action(
        "channel-rotate",
        ADMINS_ONLY,
        "channel.rotate_secret",
        "channel",
        lambda w: {"reason": "security test", "confirm": "yes"},
        200,
        may_change=frozenset({"secret_encrypted", "secret_env", "secret_set_at", "updated_at"}),
    ),
    Action(
        "channel-test",
        ADMINS_ONLY,
        "channel.test",
        None,
        lambda w: {},
        302,
        status_tells=False,
        creates={"sandboxes.NotificationEvent": 1, "sandboxes.NotificationDelivery": 1},
        url_target="channel",
    ),
    Action(
        "channel-delete",
        ADMINS_ONLY,
        "channel.delete",
        None,
        _reason,
        302,
        status_tells=False,
        creates={"sandboxes.NotificationChannel": -1},
        url_target="channel",
    ),
]
ACTIONS += CHANNEL_ACTIONS
ACTIONS += [
    Action(
        "owner-mail-edit",
        ADMINS_ONLY,
        "owner_mail.update",
        None,  # the setting is created by its first save
        lambda w: {
            "url": "mailtos://console:secret@smtp.example.com?from=console@example.com",
            "enabled": "on",
            "reason": "security test",
        },
        302,
        creates={"sandboxes.OwnerMail": 1},
        url_target="environment",
    ),
]
ACTIONS += [
    Action(
        "environment-prices",
        ADMINS_ONLY,
        "environment.edit_prices",
        "environment",
        lambda w: {
            f"price-{w['environment'].pk}-{k}": v
            for k, v in {
                "price_currency": "EUR",
                "price_vcpu_hour_running": "0.05",
                "reason": "security test",
            }.items()
        },
        302,
        may_change=frozenset({"price_currency", "price_vcpu_hour_running", "updated_at"}),
    ),
    Action(
        "user-create",
        ADMINS_ONLY,
        "user.create",
        None,
        lambda w: {"username": "newcomer", "role": "reviewer", "reason": "security test"},
        200,
        creates={"auth.User": 1},
    ),
    Action(
        "user-password-link",
        ADMINS_ONLY,
        "user.password_link",
        None,  # a token is derived from the row; nothing on it changes
        _reason,
        200,
        url_target="member",
    ),
    Action(
        "user-role",
        ADMINS_ONLY,
        "user.grant_role",
        None,  # the role lives in the groups table, not on the user row
        lambda w: {"role": "operator", "reason": "security test"},
        302,
        url_target="member",
    ),
    Action(
        "user-companies",
        ADMINS_ONLY,
        "user.companies",
        None,  # the limit lives in its own table (README, company scope)
        lambda w: {"companies": [str(w["company"].pk)], "reason": "security test"},
        302,
        creates={"sandboxes.CompanyScope": 1},
        url_target="member",
    ),
]
ACTIONS += [
    # A read of the provider, but audited: a POST every role may make.
    Action(
        "sandbox-provider-state",
        frozenset({"reviewer", "operator", "admin"}),
        "retirement.ask_provider",
        None,
        lambda w: {},
        200,
        url_target="awaiting",
    ),
]
ACTIONS += [
    # Enqueues one pass through django-q2 (a broker row, not a console row).
    Action(
        "passes-run",
        OPERATORS_AND_ADMINS,
        "reconciler.run_pass",
        None,
        _reason,
        302,
        status_tells=False,
    ),
]
ACTIONS_BY_NAME = {a.name: a for a in ACTIONS}

# Read-only console pages: login and a console role, GET only.
PAGES = {
    "dashboard": None,
    "sandbox-list": None,
    "sandbox-detail": "awaiting",
    "attachment": "attachment",
    "approvals": None,
    "audit": None,
    "audit-export-csv": None,
    "audit-export-json": None,
    "passes": None,
    "pass-detail": "pass",
    "heartbeat": None,
    "environments": None,
    "tokens": None,
    "channels": "environment",
    "channel-detail": "channel",
    "owner-mail": "environment",
    "task": "task",
    "users": None,
    "sandbox-by-id": "awaiting",
    # A zip, streamed: everything salvaged from a sandbox (every role reads it).
    "sandbox-salvage": "salvaged",
}

# Who reads each page: every console role, except where listed here (everyone
# else gets 403).
READERS = frozenset({"reviewer", "operator", "admin"})
PAGE_ROLES = {"tokens": ADMINS_ONLY, "users": ADMINS_ONLY}
# What a page every role reads shows admins only, by a marker in its HTML: a
# channel's delivery log (what each receiver answered, why a send failed).
ADMIN_DETAIL = {"channel-detail": "data-delivery-status"}


def page_url(name: str, world) -> str:
    """The URL of a read-only page for the objects of the security world."""
    target = PAGES[name]
    if target is None:
        return reverse(name)
    if target == "attachment":
        from tests.factories import AttachmentFactory

        return reverse(name, kwargs={"pk": AttachmentFactory().pk})
    if target == "salvaged":
        from tests.factories import salvage_export

        salvage_export(world["awaiting"], {"notes/work.txt": b"unsaved work\n"})
        return reverse(name, kwargs={"pk": world["awaiting"].pk})
    if name == "sandbox-by-id":
        return reverse(name, kwargs={"sandbox_id": world[target].provider_lease_id})
    return reverse(name, kwargs={"pk": world[target].pk})


# Company scope (README, company scope): for a user limited to another company,
# each page naming a record answers 404 (never 403 with its title); the pages
# that list or count answer 200 without it; a pass is fleet-wide (its page lists
# only the user's companies' records).
COMPANY_PAGES_404 = {
    "sandbox-detail",
    "sandbox-by-id",
    "sandbox-salvage",
    "attachment",
    "task",
    "channels",
    "channel-detail",
    "owner-mail",
}
COMPANY_PAGES_FLEET = {"pass-detail"}
# What each action naming another company's object answers a limited user who
# holds its permission: 404, nothing changed. The bulk actions answer their
# usual redirect, refusing that record as not found. The rest name no
# company's object: a pass for the whole fleet, a new token or user (a limited
# admin's token and users are limited to the admin's companies). Setting
# company limits is refused a limited admin whoever it names (403).
COMPANY_ACTIONS_BULK = {"sandbox-bulk", "approvals-bulk"}
COMPANY_ACTIONS_UNSCOPED = {"passes-run", "token-create", "user-create"}
COMPANY_ACTIONS_403 = {"user-companies"}


# Session endpoints with their own rules (tested in test_session / test_login_limit).
SESSION = {"login", "logout", "admin-login", "password-set", "password-set-done"}
# No login: a signed link is the only key, and it only ever holds
# (tests/console/test_keep_links.py: forged, expired, used, moved, CSRF).
SIGNED_LINKS = {"keep"}
# Bearer-token machine API: POST endpoints and GET reads.
API_POSTS = {"api-events", "api-kept-sandbox-action"}
API_GETS = {"api-kept-sandboxes", "api-kept-sandbox", "api-kept-sandbox-salvage", "metrics"}

# The act API's actions and the console action each one shares.
API_ACTIONS = {
    "approve": "sandbox-approve",
    "retry": "sandbox-retry",
    "hold": "sandbox-hold",
    "release-hold": "sandbox-release-hold",
}


def url_names() -> set[str]:
    """Every named URL in the URLconf except Django's own admin site."""

    def walk(patterns):
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.namespace == "admin":
                    continue
                yield from walk(p.url_patterns)
            elif isinstance(p, URLPattern):
                yield p.name

    return set(walk(get_resolver().url_patterns))


def classified() -> set[str]:
    return {a.name for a in ACTIONS} | set(PAGES) | SESSION | SIGNED_LINKS | API_POSTS | API_GETS
