"""The audit trail: filter by actor, action, sandbox and time; export as CSV or
JSON, streamed from a server-side cursor so the table is never held in memory."""

import csv
import json

from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sandboxes.forms import AuditFilterForm
from sandboxes.models import AuditEvent
from sandboxes.views.common import console_view, keyset_page, query_without

PAGE_SIZE = 100
EXPORT_FIELDS = (
    "at",
    "actor_label",
    "action",
    "object_type",
    "object_id",
    "sandbox_id",
    "reason",
    "before",
    "after",
)
ACTIONS = (
    "retirement.approve",
    "retirement.retry",
    "retirement.hold",
    "retirement.release_hold",
    "retirement.attest",
    "environment.edit_policy",
    "token.create",
    "token.revoke",
)


def filtered_events(request):
    form = AuditFilterForm(request.GET)
    qs = AuditEvent.objects.all()
    if form.is_valid():
        data = form.cleaned_data
        if data["actor"]:
            qs = qs.filter(actor_label__icontains=data["actor"].strip())
        if data["action"]:
            qs = qs.filter(action=data["action"].strip())
        if data["sandbox"]:
            qs = qs.filter(sandbox_id=data["sandbox"].strip())
        if data["since"]:
            qs = qs.filter(at__gte=data["since"])
        if data["until"]:
            qs = qs.filter(at__lte=data["until"])
    return form, qs


@console_view
@require_GET
def audit(request):
    form, qs = filtered_events(request)
    page = keyset_page(qs, order="-at", cursor=request.GET.get("after"), size=PAGE_SIZE)
    context = {
        "form": form,
        "page": page,
        "actions": ACTIONS,
        "query": query_without(request, "after"),
        "first_page": not request.GET.get("after"),
    }
    return render(request, "sandboxes/audit.html", context)


def _row(event: AuditEvent) -> dict:
    return {
        "at": event.at.isoformat(),
        "actor_label": event.actor_label,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "sandbox_id": event.sandbox_id,
        "reason": event.reason,
        "before": event.before,
        "after": event.after,
    }


class _Echo:
    def write(self, value):
        return value


def _stream(request):
    if not request.user.has_perm("sandboxes.export_audit"):
        raise PermissionDenied
    _form, qs = filtered_events(request)
    return qs.order_by("at", "id").only(*EXPORT_FIELDS).iterator(chunk_size=2000)


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
    events = _stream(request)
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(EXPORT_FIELDS)
        for event in events:
            row = _row(event)
            yield writer.writerow(
                [
                    json.dumps(row[f], sort_keys=True)
                    if f in ("before", "after")
                    else _spreadsheet_safe(row[f])
                    for f in EXPORT_FIELDS
                ]
            )

    response = StreamingHttpResponse(rows(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename("csv")}"'
    return response


@console_view
@require_GET
def export_json(request):
    events = _stream(request)

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
