"""The approvals queue: retirements awaiting approval, with their proof, and bulk approve."""

from collections import defaultdict

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from sandboxes import actions, bulk
from sandboxes.explain import EXPLAIN_RELATED, explained_holds, next_countdown, with_glance
from sandboxes.forms import BulkApproveForm
from sandboxes.models import Receipt
from sandboxes.paging import keyset_page
from sandboxes.proof import fingerprints_of, replaced_workspace
from sandboxes.rules.proof import has_approval, proof_from_receipts
from sandboxes.views.common import console_view, counted, permission, visible_records

PAGE_SIZE = actions.MAX_BULK_APPROVE


APPROVED_SHOWN = 20


def queue_context(request, *, results=None, error="", form=None) -> dict:
    # An approved record leaves the queue at once: it waits only for the next pass.
    records = visible_records(request)
    waiting = records.awaiting_decision()
    approved = list(
        records.approved_for_next_pass()
        .select_related("environment")
        .order_by("-updated_at")[:APPROVED_SHOWN]
    )
    page = keyset_page(
        with_glance(waiting.select_related(*EXPLAIN_RELATED)),
        order="listed_at",
        cursor=request.GET.get("after"),
        size=PAGE_SIZE,
    )
    by_retirement = defaultdict(list)
    for receipt in Receipt.objects.proof_of(page.items):
        by_retirement[receipt.retirement_id].append(receipt)
    fingerprints = fingerprints_of(page.items)
    rows = []
    now = timezone.now()
    for r in page.items:
        receipts = by_retirement[r.pk]
        proof = proof_from_receipts(
            r, receipts, fingerprints[r.pk], workspace=replaced_workspace(r)
        )
        rows.append(
            {
                "r": r,
                "proof": proof,
                "approved": has_approval(r, proof, receipts),
                "holds": explained_holds(r),
                "countdown": next_countdown(r, now, r.awaiting_since),
            }
        )
    return {
        "rows": rows,
        "total": counted(waiting),
        "approved_rows": approved,
        "page": page,
        "results": results,
        "error": error,
        "form": form or BulkApproveForm(),
        "max_bulk": actions.MAX_BULK_APPROVE,
        "can_approve": request.user.has_perm("sandboxes.approve_retirement"),
    }


@console_view
@require_GET
def approvals(request):
    context = queue_context(request)
    if request.htmx:
        return render(request, "sandboxes/approvals.html#queue", context)
    return render(request, "sandboxes/approvals.html", context)


@require_POST
@console_view
@permission("approve_retirement")
def bulk_approve(request):
    form = BulkApproveForm(request.POST)
    results, error = None, ""
    if form.is_valid():
        try:
            approved, refused = bulk.bulk_approve(
                form.cleaned_data["ids"], actor=request.user, reason=form.cleaned_data["reason"]
            )
        except actions.ActionRefused as exc:
            error = str(exc)
        else:
            results = {"approved": approved, "refused": refused}
    else:
        if "reason" in form.errors:
            error = "A reason is required."
        else:
            error = form.errors["ids"][0] if "ids" in form.errors else "Select retirements."
    if request.htmx:
        context = queue_context(request, results=results, error=error, form=form)
        response = render(request, "sandboxes/approvals.html#queue", context)
        if results and results["approved"]:
            trigger_client_event(response, "retirement-changed", {"bulk": len(results["approved"])})
        return response
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Approved {len(results['approved'])}.")
        for rid, why in results["refused"].items():
            messages.warning(request, f"{rid}: {why}")
    return redirect("approvals")
