"""Which companies a console user sees and acts within (README, company scope):
one `CompanyScope` row per user and company; a user with no rows is unlimited.

The one place that decides visibility: `companies_of(actor)` reads the limit,
and each queryset's `visible_to(actor)` (Retirement, Receipt, AuditEvent,
Attachment, Issue, Environment, NotificationEvent) filters by it, so pages,
the API, exports, counts and actions ask the same question the same way.
"""

import uuid

from django.conf import settings
from django.db import models

# The attribute a user (or token) carries its limit in for the rest of a request.
_CACHE = "_company_scope"


class CompanyScope(models.Model):
    """One company a console user is limited to. A user with none sees every company."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="company_scopes"
    )
    # PROTECT: a company that vanished must never turn a limited user into an unlimited one.
    company = models.ForeignKey("Company", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "company"], name="companyscope_once_per_user")
        ]

    def __str__(self):
        return f"{self.user_id} → {self.company_id}"


def companies_of(actor) -> frozenset | None:
    """The company ids `actor` is limited to, or None for every company.

    A user: their CompanyScope rows (none: unlimited). An API token answers for
    the console user who minted it (a token made with `manage.py create_token`
    has no creator and answers to whoever runs the server: unlimited, unless
    made with `--company`). The system (None) is unlimited, and so is an actor
    that is neither a user nor a token: a notice's keep link, signed for its one
    record (sandboxes/keeping.py). An anonymous user sees nothing. Read once per
    object and kept on it."""
    if actor is None or not (hasattr(actor, "is_authenticated") or _is_token(actor)):
        return None
    cached = getattr(actor, _CACHE, False)
    if cached is not False:
        return cached
    if _is_token(actor):
        found = _token_limit(actor)
    elif not getattr(actor, "is_authenticated", False):
        found = frozenset()
    else:
        found = _limit(actor)
    setattr(actor, _CACHE, found)
    return found


def _is_token(actor) -> bool:
    return hasattr(actor, "scope") and hasattr(actor, "token_hash")  # an ApiToken


def _limit(user):
    ids = frozenset(CompanyScope.objects.filter(user=user).values_list("company_id", flat=True))
    return ids or None


def _token_limit(token) -> frozenset | None:
    """A token's own companies (`create_token --company`), within its creator's."""
    own = frozenset(uuid.UUID(str(c)) for c in token.companies or []) or None
    creator = companies_of(token.created_by) if token.created_by_id else None
    if own is None or creator is None:
        return own if creator is None else creator
    return own & creator


def forget_scope(actor) -> None:
    """Drop the limit read for `actor` (after it changed)."""
    if hasattr(actor, _CACHE):
        delattr(actor, _CACHE)


def scope_condition(actor, condition):
    """The rows `actor` may see, as a condition to filter by, or None for every
    row. `condition(ids)` builds the condition from the company ids, a list or
    (for a user whose limit was not read yet) a subquery: then the limit is
    asked inside the same query, with no round trip of its own."""
    if actor is None:
        return None
    if getattr(actor, "is_authenticated", False) and not hasattr(actor, _CACHE):
        rows = CompanyScope.objects.filter(user_id=actor.pk)
        return condition(rows.values("company_id")) | ~models.Exists(rows)
    companies = companies_of(actor)
    return None if companies is None else condition(list(companies))


class ScopedQuerySet(models.QuerySet):
    """`visible_to(actor)`: the rows of the companies `actor` may see. A row of
    no company (an ingest client that sent none) is seen only by the unlimited."""

    company_path = "company_id"

    def visible_to(self, actor):
        return self.filter_visible(actor, lambda ids: models.Q(**{f"{self.company_path}__in": ids}))

    def filter_visible(self, actor, condition):
        """`visible_to` with a condition of its own (`scope_condition`)."""
        where = scope_condition(actor, condition)
        return self if where is None else self.filter(where)
