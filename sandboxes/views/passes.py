"""The reconciler's passes: the list, one pass (which records it listed,
advanced, retired, failed, with its errors), the heartbeat every page polls,
and an operator's "Run a pass now"."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import run_now
from sandboxes.actions import ActionRefused
from sandboxes.models import ReconcilerPass, Retirement, companies_of
from sandboxes.paging import keyset_page
from sandboxes.views.common import console_view, permission

PASS_PAGE_SIZE = 50
# What a pass did to a record, in the order the detail page shows them.
RECORD_LISTS = (
    ("failed", "Failed"),
    ("retired", "Retired"),
    ("advanced", "Advanced"),
    ("listed", "Listed"),
    ("dismissed", "Dismissed"),
)


def _columns(items: list[ReconcilerPass]) -> dict[str, bool]:
    """Which optional columns the page shows: never one that is empty on every row."""
    return {
        "worker": any(p.worker for p in items),
        "failed": any(p.failed for p in items),
        "errors": any(p.errors for p in items),
        "environment": any(p.environment_name for p in items),
    }


@console_view
@require_GET
def passes(request):
    page = keyset_page(
        ReconcilerPass.objects.defer("records", "listing", "counts_by_stage"),
        order="-started_at",
        cursor=request.GET.get("after"),
        size=PASS_PAGE_SIZE,
    )
    return render(
        request,
        "sandboxes/passes.html",
        {
            "page": page,
            "first_page": not request.GET.get("after"),
            "columns": _columns(page.items),
            "can_run": request.user.has_perm("sandboxes.run_pass"),
            "limited": companies_of(request.user) is not None,
            "refusal": run_now.refusal() if request.user.has_perm("sandboxes.run_pass") else "",
        },
    )


@console_view
@require_GET
def pass_detail(request, pk):
    p = get_object_or_404(ReconcilerPass, pk=pk)
    ids = {_uuid(pk) for what, _ in RECORD_LISTS for pk in p.records_of(what)} - {None}
    records = (
        Retirement.objects.visible_to(request.user)
        .filter(pk__in=ids)
        .select_related("environment")
        .in_bulk()
    )
    limited = companies_of(request.user) is not None
    errors_of: dict[str, list[str]] = {}
    general: list = []
    for e in p.errors or []:
        if isinstance(e, dict) and e.get("retirement"):
            errors_of.setdefault(str(e["retirement"]), []).append(str(e.get("error", "")))
        else:
            general.append(e)
    groups = []
    for what, title in RECORD_LISTS:
        rows = [
            {"id": rid, "r": records.get(_uuid(rid)), "errors": errors_of.get(rid, [])}
            for rid in p.records_of(what)
            # A limited user sees only their companies' records, never another's id.
            if not limited or _uuid(rid) in records
        ]
        groups.append({"what": what, "title": title, "rows": rows})
    return render(
        request,
        "sandboxes/pass_detail.html",
        {
            "p": p,
            "groups": groups,
            "general_errors": [] if limited else general,
            "recorded": any(g["rows"] for g in groups) if limited else bool(p.records),
            "limited": limited,
        },
    )


def _uuid(value):
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@console_view
@require_GET
def heartbeat(request):
    """The heartbeat fragment every page polls (one query)."""
    return render(request, "sandboxes/_heartbeat.html", {"pulse": ReconcilerPass.objects.pulse()})


@require_POST
@console_view
@permission("run_pass")
def run_pass(request):
    try:
        run_now.run_pass_now(actor=request.user, reason=request.POST.get("reason", ""))
    except ActionRefused as exc:
        messages.error(request, f"No pass was asked for: {exc}")
        return redirect("passes")
    messages.success(request, "A pass is queued: it starts as soon as a worker is free.")
    return redirect("passes")
