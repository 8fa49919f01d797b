"""Shared pieces of the console's views: access checks and the cheap
fingerprint that live polls compare against. (Filters live on the model,
`Retirement.objects.matching`; keyset pages in `sandboxes.paging`.)"""

import hashlib
from datetime import UTC
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max
from django.http import HttpResponse, HttpResponseNotModified
from django.shortcuts import render

from sandboxes.models import Company, Environment, ReconcilerPass, Retirement, companies_of

# Every console role carries this permission: a signed-in account with no
# role sees nothing. (Exporting the audit trail is export_audit, apart.)
READ_PERMISSION = "sandboxes.view_console"

# Live regions (marked data-live) poll every 3 s; static/js/console.js lets a
# hidden tab's polls through only every 30 s. (A trigger filter such as
# [document.visibilityState=='visible'] needs eval, which the CSP forbids.)
LIVE_TRIGGER = "every 3s, retirement-changed from:body"


def console_view(view):
    """Login required (anonymous → login page), then a console role (else a
    403 page that says so, with a way to log out)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.has_perm(READ_PERMISSION):
            return render(request, "no_role.html", status=403)
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def permission(codename: str):
    """A server-side permission check for an action: 403 when missing."""
    return permission_named(f"sandboxes.{codename}")


def permission_named(perm: str):
    """A server-side check of one permission ("app.codename"): 403 when missing."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.has_perm(perm):
                codename = perm.split(".", 1)[-1]
                raise PermissionDenied(f"{codename.replace('_', ' ')} is not allowed")
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


# --- company scope (README, company scope) ----------------------------------------


def visible_companies(user) -> list:
    """The companies `user` may filter by: theirs, or every company for the unlimited."""
    limit = companies_of(user)
    qs = Company.objects.only("id", "name").order_by("name", "id")
    return list(qs if limit is None else qs.filter(pk__in=list(limit)))


def filter_choices(user) -> dict:
    """The environments and companies of the list's filter form, as `user` sees them."""
    return {
        "environments": list(
            Environment.objects.visible_to(user).only("id", "name").order_by("name")
        ),
        "companies": visible_companies(user),
    }


def visible_records(request):
    """The records the signed-in user may see: every page starts here."""
    return Retirement.objects.visible_to(request.user)


# --- live polling -------------------------------------------------------------------


def live_fingerprint(records=None) -> str:
    """A short digest that changes whenever anything the live regions show
    changes. Two small queries: per-stage counts with their latest update (of
    `records`, the user's visible ones; every record when None), and the latest
    reconciler pass."""
    records = Retirement.objects.all() if records is None else records
    per_stage = list(
        records.values_list("stage", "needs_attention")
        .annotate(n=Count("id"), last=Max("updated_at"))
        .order_by("stage", "needs_attention")
    )
    last_pass = ReconcilerPass.objects.order_by("-started_at").values_list("id", "finished_at")[:1]
    digest = hashlib.sha256(repr((per_stage, list(last_pass))).encode()).hexdigest()
    return digest[:20]


def unchanged_poll(request, fingerprint: str) -> HttpResponse | None:
    """The cheap answer to a poll when nothing changed: 204 (htmx swaps nothing)
    when the poll carries the fingerprint it was rendered with, 304 when a
    conditional request carries the current ETag."""
    if request.htmx and request.GET.get("fp") == fingerprint:
        return HttpResponse(status=204)
    if request.htmx and request.headers.get("If-None-Match") == etag_for(request, fingerprint):
        return HttpResponseNotModified()
    return None


def etag_for(request, fingerprint: str) -> str:
    # The page differs per user (buttons) and between the page and its fragment.
    part = "f" if request.htmx else "p"
    return f'W/"{fingerprint}-{request.user.pk}-{part}"'


def with_etag(response: HttpResponse, request, fingerprint: str) -> HttpResponse:
    response["ETag"] = etag_for(request, fingerprint)
    response["Cache-Control"] = "private, no-cache"
    response["Vary"] = "HX-Request, Cookie"
    return response


COUNT_CAP = 10_000


def counted(qs, cap: int = COUNT_CAP) -> dict:
    """How many rows match, counted up to `cap` (a bounded COUNT over a LIMIT
    subquery, so a huge table costs no more than `cap` index entries)."""
    n = qs.order_by()[: cap + 1].count()
    return {"n": min(n, cap), "more": n > cap}


def query_without(request, *names: str) -> str:
    """The current query string without `names` (to build links that change one thing)."""
    params = request.GET.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


# --- the reconciler's schedule --------------------------------------------------------


def next_pass_words(now) -> str:
    """When the next scheduled pass runs, from the heartbeat's reading of the
    django-q2 schedule (`ReconcilerPass.objects.pulse`, the one the banner
    shows): "in 40 s (00:51:20 UTC)", "as soon as…" when it is already due, or
    what is missing."""
    from sandboxes.models import ReconcilerPass
    from sandboxes.rules.words import duration

    next_run = ReconcilerPass.objects.pulse(now).next_run
    if next_run is None:
        return "when a pass is scheduled (none is: run manage.py setup_schedules)"
    at = f"{next_run.astimezone(UTC):%H:%M:%S} UTC"
    if next_run <= now:
        return f"as soon as the task queue picks it up (due since {at})"
    return f"in {duration(round((next_run - now).total_seconds()))} ({at})"
