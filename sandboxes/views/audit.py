"""The audit trail: filter by actor, action, sandbox and time; export as CSV or
JSON, streamed from a server-side cursor so the table is never held in memory."""

import csv
import json
import uuid

from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sandboxes.forms import AuditFilterForm
from sandboxes.models import AuditEvent, Company, Environment
from sandboxes.paging import keyset_page
from sandboxes.views.common import console_view, counted, query_without

PAGE_SIZE = 100
EXPORT_FIELDS = (
    "at",
    "actor_label",
    "action",
    "object_type",
    "object_id",
    "sandbox_id",
    "company_id",
    "reason",
    "before",
    "after",
)
# Beside the stored columns, each row's company name (README, company scope).
EXPORT_COLUMNS = (*EXPORT_FIELDS[:6], "company", *EXPORT_FIELDS[6:])


def filtered_events(request):
    """The form and its rows; a filter that does not validate matches nothing
    (never everything): the page says which field is wrong."""
    form = AuditFilterForm(request.GET)
    qs = AuditEvent.objects.visible_to(request.user)
    if not form.is_valid():
        return form, qs.none()
    data = form.cleaned_data
    if data["actor"]:
        qs = qs.filter(actor_label__icontains=data["actor"].strip())
    if data["action"]:
        qs = qs.filter(action=data["action"])
    if data["sandbox"]:
        qs = qs.filter(sandbox_id=data["sandbox"].strip())
    if data["company"]:
        qs = qs.filter(company_id=data["company"])
    if data["since"]:
        qs = qs.filter(at__gte=data["since"])
    if data["until"]:
        qs = qs.filter(at__lte=data["until"])
    return form, qs.annotate(company_name=_company_name())


def _company_name():
    name = Company.objects.filter(pk=OuterRef("company_id")).values("name")[:1]
    return Subquery(name)


@console_view
@require_GET
def audit(request):
    form, qs = filtered_events(request)
    page = keyset_page(qs, order="-at", cursor=request.GET.get("after"), size=PAGE_SIZE)
    # Environments by name, not uuid: one query for the page's environment rows.
    env_ids = {e.object_id for e in page.items if e.object_type == "environment"}
    names = dict(
        Environment.objects.visible_to(request.user)
        .filter(pk__in=[i for i in env_ids if _is_uuid(i)])
        .values_list("pk", "name")
    )
    for event in page.items:
        event.object_name = (
            names.get(_as_uuid(event.object_id)) if event.object_type == "environment" else ""
        )
    context = {
        "form": form,
        "page": page,
        "total": counted(qs) if not form.errors else {"n": 0, "more": False},
        "query": query_without(request, "after"),
        "first_page": not request.GET.get("after"),
    }
    return render(request, "sandboxes/audit.html", context, status=400 if form.errors else 200)


def _as_uuid(value):
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _is_uuid(value) -> bool:
    return _as_uuid(value) is not None


def _row(event: AuditEvent) -> dict:
    return {
        "at": event.at.isoformat(),
        "actor_label": event.actor_label,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "sandbox_id": event.sandbox_id,
        "company_id": str(event.company_id) if event.company_id else None,
        "company": event.company_name or None,
        "reason": event.reason,
        "before": event.before,
        "after": event.after,
    }


class _Echo:
    def write(self, value):
        return value


class BadFilter(Exception):
    def __init__(self, form):
        super().__init__(form.errors)
        self.form = form


def _stream(request):
    if not request.user.has_perm("sandboxes.export_audit"):
        raise PermissionDenied
    form, qs = filtered_events(request)
    if form.errors:
        raise BadFilter(form)
    return qs.order_by("at", "id").only(*EXPORT_FIELDS).iterator(chunk_size=2000)


def _bad_filter(exc: BadFilter) -> HttpResponse:
    lines = [
        f"{exc.form.fields[name].label or name.capitalize()}: {' '.join(errors)}"
        for name, errors in exc.form.errors.items()
    ]
    return HttpResponse(
        "Bad filter, nothing exported.\n" + "\n".join(lines) + "\n",
        status=400,
        content_type="text/plain; charset=utf-8",
    )


def _filename(ext: str) -> str:
    return f"audit-{timezone.now():%Y%m%d-%H%M%S}.{ext}"


def _spreadsheet_safe(value):
    """Reasons and ids are free text: a cell starting with = + - @ would run as a
    formula when a reviewer opens the export in a spreadsheet."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


@console_view
@require_GET
def export_csv(request):
    try:
        events = _stream(request)
    except BadFilter as exc:
        return _bad_filter(exc)
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(EXPORT_COLUMNS)
        for event in events:
            row = _row(event)
            yield writer.writerow(
                [
                    json.dumps(row[f], sort_keys=True)
                    if f in ("before", "after")
                    else _spreadsheet_safe(row[f])
                    for f in EXPORT_COLUMNS
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename("csv")}"'
    return response


@console_view
@require_GET
def export_json(request):
    try:
        events = _stream(request)
    except BadFilter as exc:
        return _bad_filter(exc)

    def chunks():
        yield "[\n"
        first = True
        for event in events:
            yield ("" if first else ",\n") + json.dumps(_row(event), sort_keys=True)
            first = False
        yield "\n]\n"

    response = StreamingHttpResponse(chunks(), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{_filename("json")}"'
    return response
