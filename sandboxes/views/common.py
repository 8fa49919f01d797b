"""Shared pieces of the console's views: access checks, the hold filter, keyset
pages and the cheap fingerprint that live polls compare against."""

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.db.models import Count, Max, Q
from django.http import HttpResponse, HttpResponseNotModified
from django.shortcuts import render
from django.utils.dateparse import parse_datetime

from sandboxes.models import ReconcilerPass, Retirement

# Every console role carries this permission, so it doubles as "may read the
# console": a signed-in account with no role sees nothing.
READ_PERMISSION = "sandboxes.export_audit"

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


def hold_filter(qs, code: str, field: str = "holds"):
    """Rows whose JSON list `field` contains `code`. PostgreSQL has JSON
    containment; SQLite (the embedded `make run`) does not, so match the quoted
    code in the stored text instead (codes are plain identifiers)."""
    if connection.vendor == "postgresql":
        return qs.filter(**{f"{field}__contains": [code]})
    return qs.filter(**{f"{field}__icontains": f'"{code}"'})


# --- keyset pagination ------------------------------------------------------------


@dataclass
class Page:
    items: list
    next_cursor: str | None
    size: int


def _encode(value) -> dict:
    if isinstance(value, datetime):
        return {"t": "dt", "v": value.isoformat()}
    return {"t": "raw", "v": value}


def _decode(data: dict):
    if data.get("t") == "dt":
        return parse_datetime(data["v"])
    return data.get("v")


def encode_cursor(value, pk) -> str:
    raw = json.dumps({**_encode(value), "id": str(pk)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class BadCursor(ValueError):
    """A paging cursor this console did not issue (or issued for another
    order). The middleware answers 400 naming the query parameter."""

    def __init__(self, param: str, detail: str = ""):
        super().__init__(
            f"the {param!r} parameter is not a cursor this page issued"
            + (f" ({detail})" if detail else "")
        )
        self.param = param


def decode_cursor(cursor: str):
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        return _decode(data), data["id"]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _checked(model, field: str, value, pk, param: str):
    """The cursor's (value, pk) as the field's own Python types, or BadCursor:
    a list, a dict, None, NUL or an out-of-range number must not reach SQL."""
    model_field = model._meta.get_field(field)
    kind = model_field.get_internal_type()
    expected = (
        datetime
        if kind == "DateTimeField"
        else int
        if kind.endswith("IntegerField") or kind == "AutoField"
        else str
    )
    # encode_cursor writes datetimes as {"t": "dt"}, everything else as JSON,
    # and the pk as a string: any other type is not a cursor we issued.
    for name, raw, want in ((field, value, expected), ("pk", pk, str)):
        if not isinstance(raw, want) or isinstance(raw, bool):
            raise BadCursor(param, f"{name} has the wrong type")
        if isinstance(raw, str) and ("\x00" in raw or len(raw) > 1000):
            raise BadCursor(param, f"{name} is not a value of that field")
    try:
        value = model_field.clean(value, None)
        pk = model._meta.pk.clean(pk, None)
    except (ValidationError, TypeError, ValueError, OverflowError) as exc:
        raise BadCursor(param, "it does not match this page's order") from exc
    return value, pk


def keyset_page(qs, *, order: str, cursor: str | None, size: int, param: str = "after") -> Page:
    """One page ordered by (`order`, pk), resuming after `cursor`. `order` is a
    non-null field name, '-' prefixed for descending. No OFFSET, no COUNT.
    A cursor that is not one this function issued for this order raises
    BadCursor naming `param` (a 400, not a 500 or a silent first page)."""
    desc = order.startswith("-")
    field = order.lstrip("-")
    qs = qs.order_by(order, "-pk" if desc else "pk")
    decoded = decode_cursor(cursor) if cursor else None
    if cursor and decoded is None:
        raise BadCursor(param)
    if decoded is not None:
        value, pk = _checked(qs.model, field, *decoded, param)
        op = "lt" if desc else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": value}) | Q(**{field: value, f"pk__{op}": pk}))
    rows = list(qs[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, field), last.pk)
    return Page(rows, next_cursor, size)


# --- live polling -------------------------------------------------------------------


def live_fingerprint() -> str:
    """A short digest that changes whenever anything the live regions show
    changes. Two small queries: per-stage counts with their latest update, and
    the latest reconciler pass."""
    per_stage = list(
        Retirement.objects.values_list("stage", "needs_attention")
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
