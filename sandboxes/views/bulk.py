"""The kept-sandbox list's bulk bar: hold, release a hold, retry or approve the
selected rows or every record matching the list's filters, each record checked
and audited on its own (sandboxes/bulk.py)."""

import uuid
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from sandboxes import actions, bulk
from sandboxes.forms import BULK_CHOICES, BulkForm, KeptFilterForm
from sandboxes.models import Retirement
from sandboxes.views.common import console_view, filter_choices

FILTERS = (
    "q",
    "stage",
    "kind",
    "hold",
    "environment",
    "company",
    "provider_state",
    "attention",
    "sort",
)
DONE_WORDS = {
    "hold": "Held",
    "release_hold": "Released the hold on",
    "retry": "Scheduled a retry of",
    "approve": "Approved",
}


def _allowed(user) -> list[tuple[str, str]]:
    return [
        (name, words)
        for name, words in BULK_CHOICES
        if user.has_perm(f"sandboxes.{bulk.BULK_ACTIONS[name][1]}")
    ]


def bulk_context(request, form: KeptFilterForm) -> dict:
    """What the list needs to draw its bulk bar (nothing for a reviewer)."""
    allowed = _allowed(request.user)
    filters = [(name, request.GET.get(name, "")) for name in FILTERS if request.GET.get(name)]
    return {
        "bulk_actions": allowed,
        "bulk_filters": filters,
        "max_bulk": bulk.MAX_BULK,
        "max_hold_days": actions.MAX_HOLD.days,
        "may_hold_forever": request.user.has_perm("sandboxes.edit_policy"),
    }


def _matching_ids(request) -> tuple[list[str], str]:
    """Every record the posted filters match among those the user sees, or why
    not (too many)."""
    filters = KeptFilterForm(request.POST, **filter_choices(request.user))
    if not filters.is_valid():
        name = next(iter(filters.errors))
        return [], f"{name}: {filters.errors[name][0]}"
    ids = list(
        Retirement.objects.visible_to(request.user)
        .matching(filters.cleaned_data)
        .order_by("listed_at", "pk")
        .values_list("pk", flat=True)[: bulk.MAX_BULK + 1]
    )
    if len(ids) > bulk.MAX_BULK:
        return [], (
            f"all_matching: more than {bulk.MAX_BULK} kept sandboxes match these filters; "
            f"a bulk action takes at most {bulk.MAX_BULK} at a time. Narrow the filters."
        )
    return [str(i) for i in ids], ""


def _sandbox_ids(ids, user) -> dict[str, str]:
    """The sandbox ids of the records `user` sees (another company's stays a record id)."""
    pks = []
    for i in ids:
        try:
            pks.append(uuid.UUID(str(i)))
        except ValueError:
            continue
    rows = (
        Retirement.objects.visible_to(user)
        .filter(pk__in=pks)
        .values_list("pk", "provider_lease_id")
    )
    return {str(pk): sandbox for pk, sandbox in rows}


def _run(request) -> tuple[dict | None, str]:
    form = BulkForm(request.POST)
    name = request.POST.get("action", "")
    if not _allowed(request.user):
        raise PermissionDenied("bulk actions are not allowed for this account")
    if name in bulk.BULK_ACTIONS and not request.user.has_perm(
        f"sandboxes.{bulk.BULK_ACTIONS[name][1]}"
    ):
        raise PermissionDenied(f"{name.replace('_', ' ')} is not allowed for this account")
    if not form.is_valid():
        return None, form.first_error()
    data = form.cleaned_data
    if data["all_matching"]:
        ids, error = _matching_ids(request)
        if error:
            return None, error
    else:
        ids = data["ids"]
    if not ids:
        return None, 'ids: select at least one kept sandbox, or tick "all matching these filters".'
    try:
        done, refused = bulk.bulk(
            data["action"], ids, actor=request.user, reason=data["reason"], until=data["until"]
        )
    except actions.ActionRefused as exc:
        return None, str(exc)
    names = _sandbox_ids(refused, request.user)
    return {
        "action": data["action"],
        "words": DONE_WORDS[data["action"]],
        "done": len(done),
        "asked": len(ids),
        "refused": [(names.get(rid, rid), why) for rid, why in refused.items()],
    }, ""


@require_POST
@console_view
def bulk_act(request):
    """POST (CSRF): one action on many records; answers how many were done and
    which were refused, and why."""
    results, error = _run(request)
    if request.htmx:
        response = render(
            request, "sandboxes/list.html#bulk_result", {"results": results, "error": error}
        )
        if results and results["done"]:
            trigger_client_event(response, "retirement-changed", {"bulk": results["done"]})
        return response
    if error:
        messages.error(request, error)
    else:
        assert results is not None
        messages.success(
            request, f"{results['words']} {results['done']} of {results['asked']} kept sandboxes."
        )
        for sandbox, why in results["refused"]:
            messages.warning(request, f"{sandbox}: {why}")
    query = urlencode([(n, request.POST[n]) for n in FILTERS if request.POST.get(n)])
    return redirect(reverse("sandbox-list") + (f"?{query}" if query else ""))
