"""Kept sandboxes: the filtered live list, one sandbox's detail, and the
operator buttons (approve, retry, hold, release hold, attest)."""

import hashlib
import logging

from django.contrib import messages
from django.db.models import Count, F, Max
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from sandboxes import actions, audit
from sandboxes.costs import cost_sort_expression, daily_cost, daily_cost_expression
from sandboxes.explain import explained_holds, kept_since, next_countdown, with_glance
from sandboxes.forms import AttestForm, HoldForm, KeptFilterForm, ReasonForm
from sandboxes.models import (
    Attachment,
    AuditEvent,
    EnvironmentLease,
    Issue,
    Receipt,
    Retirement,
)
from sandboxes.models.choices import ReceiptKind, Stage
from sandboxes.paging import keyset_page
from sandboxes.proof import fingerprint_from, replaced_workspace
from sandboxes.rules.holds import blocking_holds
from sandboxes.rules.proof import PROOF_KINDS, has_approval, proof_from_receipts, void_reason
from sandboxes.views.bulk import bulk_context
from sandboxes.views.common import (
    LIVE_TRIGGER,
    console_view,
    counted,
    filter_choices,
    live_fingerprint,
    next_pass_words,
    permission,
    query_without,
    unchanged_poll,
    visible_records,
    with_etag,
)

PAGE_SIZE = 50
HISTORY_ROWS = 200

log = logging.getLogger(__name__)


@console_view
@require_GET
def sandbox_list(request):
    fingerprint = live_fingerprint(visible_records(request))
    unchanged = unchanged_poll(request, fingerprint)
    if unchanged is not None:
        return unchanged
    choices = filter_choices(request.user)
    form = KeptFilterForm(request.GET, **choices)
    data = form.cleaned_data if form.is_valid() else {}
    qs = (
        visible_records(request)
        .select_related("environment", "lease__issue", "lease__heartbeat_run")
        .with_company()
        .matching(data)
    )
    total = counted(qs)
    qs = with_glance(qs.annotate(daily=daily_cost_expression(), cost_sort=cost_sort_expression()))
    page = keyset_page(
        qs,
        order=data.get("sort") or "-updated_at",
        cursor=request.GET.get("after"),
        size=PAGE_SIZE,
    )
    now = timezone.now()
    for r in page.items:
        r.countdown = next_countdown(r, now, r.awaiting_since) if r.is_open else None
    widen = ""
    if not page.items and (data.get("stage") or "") != "all":
        # An empty search inside the default "open stages": the sandbox may be closed.
        params = request.GET.copy()
        params["stage"] = "all"
        params.pop("after", None)
        params.pop("fp", None)
        widen = params.urlencode()
    context = {
        "form": form,
        "page": page,
        "total": total,
        "widen": widen,
        "fp": fingerprint,
        "live_trigger": LIVE_TRIGGER,
        "query": query_without(request, "fp", "after"),
        "page_query": query_without(request, "fp"),
        "first_page": not request.GET.get("after"),
        "now": now,
        **bulk_context(request, form),
    }
    if request.htmx and request.GET.get("fp") is not None:
        return with_etag(render(request, "sandboxes/list.html#rows", context), request, fingerprint)
    return render(request, "sandboxes/list.html", context)


# --- detail -----------------------------------------------------------------------------


_BOUND_KINDS = {
    ReceiptKind.SALVAGE_COMPARE: "compare",
    ReceiptKind.SALVAGE_EXPORT: "export",
    ReceiptKind.OPERATOR_ATTESTED: "attestation",
    ReceiptKind.APPROVAL: "approval",
}


def _void(receipt: Receipt, r: Retirement, fingerprint: dict) -> str:
    """Why this record's proof receipt no longer proves anything, or ""."""
    what = _BOUND_KINDS.get(receipt.kind)
    if what is None or receipt.retirement_id != r.pk or receipt.payload.get("root_not_found"):
        return ""
    if receipt.kind in PROOF_KINDS and receipt.payload.get("stale"):
        return ""
    return void_reason((receipt.payload or {}).get("fingerprint"), fingerprint, what)


def _receipt_view(receipt: Receipt, attachments: dict, r: Retirement, fingerprint: dict) -> dict:
    payload = receipt.payload or {}
    view = {
        "r": receipt,
        "payload": payload,
        "diff": None,
        "files": None,
        "void": _void(receipt, r, fingerprint),
    }
    if receipt.kind == ReceiptKind.SALVAGE_COMPARE:
        rows = []
        for change in ("added", "changed", "deleted"):
            for item in payload.get(change) or []:
                entry = item if isinstance(item, dict) else {"path": str(item)}
                rows.append({"change": change, **entry})
        view["diff"] = rows
    elif receipt.kind == ReceiptKind.SALVAGE_EXPORT:
        files = []
        for item in payload.get("files") or []:
            entry = item if isinstance(item, dict) else {"path": str(item)}
            key = str(entry.get("attachment") or entry.get("attachment_id") or "")
            att = attachments.get(key) or attachments.get(entry.get("sha256") or "")
            files.append({**entry, "attachment_obj": att})
        view["files"] = files
    return view


def _salvaged(receipts: list[Receipt]) -> dict | None:
    """What the sandbox's verified exports hold (ReceiptQuerySet.salvage_of's
    receipts, from those the page loaded), or None when nothing was salvaged."""
    exports = [x for x in receipts if x.is_salvage]
    if not exports:
        return None
    files = [f for x in exports for f in x.payload.get("files") or [] if isinstance(f, dict)]
    size = sum(f["size"] for f in files if isinstance(f.get("size"), int))
    return {"exports": len(exports), "files": len(files), "bytes": size}


def _uploads_and_fingerprint(r: Retirement) -> dict:
    """The record's Paperclip uploads, read once, and the page's fingerprint from them."""
    uploads = list(r.paperclip_uploads.order_by("created_at"))
    return {"paperclip_uploads": uploads, "fp": detail_fingerprint(r, uploads)}


def detail_context(request, r: Retirement, *, error: str = "", notice: str = "") -> dict:
    receipts = list(
        Receipt.objects.of_sandbox(r.provider, r.provider_lease_id).select_related("retirement")
    )
    leases = list(
        EnvironmentLease.objects.filter(provider=r.provider, provider_lease_id=r.provider_lease_id)
        .select_related("heartbeat_run", "issue", "environment", "execution_workspace")
        .order_by("acquired_at", "created_at")
    )
    # Proof bound to what the sandbox is now, from the rows loaded for the page.
    lease = next((x for x in leases if x.pk == r.lease_id), None)
    fingerprint = fingerprint_from(r, lease, receipts)
    proof = proof_from_receipts(r, receipts, fingerprint, workspace=replaced_workspace(r))
    approved = has_approval(r, proof, receipts)
    attachments = {}
    for a in Attachment.objects.filter(retirement=r):
        attachments[str(a.pk)] = a
        attachments.setdefault(a.sha256, a)
    user = request.user
    is_open = r.is_open
    holds = explained_holds(r)
    events = AuditEvent.objects.visible_to(user).filter(sandbox_id=r.provider_lease_id)
    events = list(events.order_by("-at")[:HISTORY_ROWS])
    history = [{"type": "audit", "at": e.at, "who": e.actor_label, "e": e} for e in events] + [
        {"type": "receipt", "at": x.confirmed_at, "who": x.actor or "paperclip", "r": x}
        for x in receipts
    ]
    history.sort(key=lambda item: item["at"])
    return {
        "r": r,
        "daily_cost": daily_cost(r) if is_open else None,
        **_uploads_and_fingerprint(r),
        "live_trigger": LIVE_TRIGGER,
        "history": history,
        "holds": holds,
        "blocking": [
            code.replace("_", " ")
            for code in blocking_holds(list(r.holds or []), r.kind)
            or (list(r.holds or []) if r.stage == Stage.HELD else [])
        ]
        or (["a hold"] if r.stage == Stage.HELD else []),
        "leases": leases,
        "receipts": [_receipt_view(x, attachments, r, fingerprint) for x in receipts],
        "proof": proof,
        "approved": approved,
        "is_open": is_open,
        "operator_held": bool(r.operator_hold_reason),
        "can_approve": user.has_perm("sandboxes.approve_retirement"),
        "can_retry": user.has_perm("sandboxes.retry_retirement"),
        "can_hold": user.has_perm("sandboxes.hold_retirement"),
        "can_attest": user.has_perm("sandboxes.attest_retirement"),
        "can_download_salvage": user.has_perm("sandboxes.download_salvage"),
        "salvaged": _salvaged(receipts),
        "awaiting": r.stage == Stage.AWAITING_APPROVAL,
        "error": error,
        "notice": notice,
        **_glance(r, user),
    }


def _glance(r: Retirement, user) -> dict:
    """When the sandbox goes and how long it has been kept (sandboxes/explain.py)."""
    now = timezone.now()
    return {
        "now": now,
        "kept_since": kept_since(r),
        "countdown": next_countdown(r, now) if r.is_open else None,
        "may_hold_forever": user.has_perm("sandboxes.edit_policy"),
    }


NOT_KEPT = "The console keeps no record of this sandbox."


def _get_retirement(request, pk) -> Retirement:
    """The record, if the user may see it; another company's is a 404 that
    names nothing (README, company scope)."""
    r = _records(request).filter(pk=pk).first()
    if r is None:
        raise Http404(NOT_KEPT)
    return r


def _records(request):
    return (
        visible_records(request)
        .select_related("environment", "lease__issue", "lease__heartbeat_run")
        .with_company()
    )


def current_for_sandbox(request, sandbox_id: str) -> Retirement | None:
    return Retirement.current_for_sandbox(
        sandbox_id, "environment", "lease__issue", "lease__heartbeat_run", actor=request.user
    )


@console_view
@require_GET
def sandbox_detail(request, pk):
    r = _records(request).filter(pk=pk).first() or current_for_sandbox(request, str(pk))
    if r is None:
        # A Daytona sandbox id is a uuid too: /sandboxes/<its id>/ is tried both ways.
        raise Http404(NOT_KEPT)
    return _detail_response(request, r)


@console_view
@require_GET
def sandbox_by_id(request, sandbox_id):
    """/sandboxes/<provider sandbox id>/: the id people paste from Daytona."""
    r = current_for_sandbox(request, sandbox_id)
    if r is None:
        raise Http404(NOT_KEPT)
    return _detail_response(request, r)


def detail_fingerprint(r: Retirement, uploads: list | None = None) -> str:
    """Changes whenever the live parts of a sandbox's page would: the record, its
    receipts, its audit rows and its exports' attachment to the Paperclip task.
    Three small aggregates beside the record itself (two when the page has read
    the record's uploads already, `uploads`)."""
    receipts = Receipt.objects.of_sandbox(r.provider, r.provider_lease_id).aggregate(
        n=Count("id"), last=Max("created_at")
    )
    events = AuditEvent.objects.filter(sandbox_id=r.provider_lease_id).aggregate(
        n=Count("id"), last=Max("at")
    )
    if uploads is None:
        last_upload = r.paperclip_uploads.aggregate(last=Max("updated_at"))["last"]
    else:
        last_upload = max((u.updated_at for u in uploads), default=None)
    state = (
        r.updated_at,
        r.stage,
        tuple(receipts.values()),
        tuple(events.values()),
        last_upload,
    )
    return hashlib.sha256(repr(state).encode()).hexdigest()[:20]


def _detail_response(request, r: Retirement):
    part = request.GET.get("part")
    if request.htmx and part == "live":
        # A poll: 204 when nothing moved; else the state, history and receipts
        # (out of band), and a `stage-changed` event so the actions re-render.
        fingerprint = detail_fingerprint(r)
        if request.GET.get("fp") == fingerprint:
            return HttpResponse(status=204)
        response = render(request, "sandboxes/detail.html#live", detail_context(request, r))
        if request.GET.get("stage") != r.stage:
            trigger_client_event(response, "stage-changed", {"stage": r.stage})
        return response
    context = detail_context(request, r)
    if request.htmx and part in ("panel", "receipts", "history"):
        return render(request, f"sandboxes/detail.html#{part}", context)
    return render(request, "sandboxes/detail.html", context)


@require_POST
@console_view
def provider_state(request, pk):
    """Ask the provider for the sandbox's state now. The provider is only read,
    but the ask is audited (a call with the environment's credentials), so it
    is a POST with CSRF: a link or a prefetch cannot make it."""
    from sandboxes.providers.base import ProviderError

    r = _get_retirement(request, pk)
    state, error = None, ""
    try:
        state = r.environment.provider_client(r.provider).get(r.provider_lease_id).state
    except (ProviderError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    # A call to the provider with the environment's credentials, on a person's
    # request: the audit trail says who asked and what came back.
    audit.record(
        actor=request.user,
        action="retirement.ask_provider",
        obj=r,
        reason="Ask the provider now",
        after={"provider_state": str(state) if state else None, "error": error[:500]},
    )
    context = {"r": r, "state": state, "error": error, "asked_at": timezone.now()}
    if request.htmx:
        return render(request, "sandboxes/detail.html#provider_state", context)
    return render(request, "sandboxes/provider_state.html", context)


@console_view
@require_GET
def attachment_download(request, pk):
    att = get_object_or_404(Attachment.objects.visible_to(request.user), pk=pk)
    try:
        handle = att.file.open("rb")
    except FileNotFoundError:
        raise Http404("The stored file is missing.") from None
    except OSError as exc:
        # The storage could not be read (a bucket that is down): say so, not a 500.
        log.warning("attachment %s could not be read: %s", att.pk, exc)
        return HttpResponse(
            f"The stored file could not be read right now: {exc}. Try again later.",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    name = att.path.rsplit("/", 1)[-1] or att.sha256
    return FileResponse(handle, as_attachment=True, filename=name)


# --- actions ----------------------------------------------------------------------------

DONE = {
    "approve": "Approved — retires on the next pass.",
    "retry": "Retry scheduled: the reconciler picks this sandbox up on its next pass.",
    "hold": "Held: the reconciler will not touch this sandbox until the hold is released.",
    "release_hold": "Hold released: the reconciler re-checks this sandbox now.",
    "attest": "Attested: unsaved work is discarded and the sandbox is due for retirement.",
}
# The actions whose answer says when the next pass runs (they wait for it).
WHEN_NEXT_PASS = ("approve", "retry", "release_hold", "attest")


def _act(request, pk, name: str, form_class, call):
    r = _get_retirement(request, pk)
    form = form_class(request.POST)
    error = notice = ""
    if not form.is_valid():
        error = (
            "A reason is required."
            if "reason" in form.errors
            else str(form.errors["until"][0])
            if "until" in form.errors
            else "Type the sandbox id exactly as shown to confirm."
        )
    else:
        try:
            call(r.pk, actor=request.user, **form.cleaned_data)
        except actions.ActionRefused as exc:
            error = str(exc)
        else:
            notice = DONE[name]
            if name in WHEN_NEXT_PASS:
                notice = f"{notice} The next pass runs {next_pass_words(timezone.now())}."
    r = _get_retirement(request, pk)
    if request.htmx:
        # The panel, and the history and receipts out of band (an action adds rows).
        response = render(
            request,
            "sandboxes/detail.html#acted",
            detail_context(request, r, error=error, notice=notice),
        )
        if not error:
            trigger_client_event(response, "retirement-changed", {"id": str(r.pk), "action": name})
        return response
    if error:
        context = detail_context(request, r, error=error)
        return render(request, "sandboxes/detail.html", context, status=409)
    messages.success(request, notice)
    return redirect("sandbox-detail", pk=r.pk)


@require_POST
@console_view
@permission("approve_retirement")
def approve(request, pk):
    return _act(request, pk, "approve", ReasonForm, actions.approve)


@require_POST
@console_view
@permission("retry_retirement")
def retry(request, pk):
    return _act(request, pk, "retry", ReasonForm, actions.retry)


@require_POST
@console_view
@permission("hold_retirement")
def hold(request, pk):
    return _act(request, pk, "hold", HoldForm, actions.hold)


@require_POST
@console_view
@permission("hold_retirement")
def release_hold(request, pk):
    return _act(request, pk, "release_hold", ReasonForm, actions.release_hold)


@require_POST
@console_view
@permission("attest_retirement")
def attest(request, pk):
    return _act(request, pk, "attest", AttestForm, actions.attest)


# --- a task's kept sandboxes ---------------------------------------------------------


@console_view
@require_GET
def task_detail(request, pk):
    """One task (Paperclip issue): its kept sandboxes and every lease it holds."""
    issue = get_object_or_404(
        Issue.objects.visible_to(request.user).select_related("bound_workspace"), pk=pk
    )
    retirements = list(
        visible_records(request)
        .filter(lease__issue=issue)
        .select_related("environment", "lease__heartbeat_run", "lease__issue")
        .order_by("-listed_at")[:200]
    )
    leases = list(
        EnvironmentLease.objects.filter(issue=issue)
        .select_related("environment", "heartbeat_run")
        .order_by(F("acquired_at").desc(nulls_last=True), "-created_at")[:200]
    )
    return render(
        request,
        "sandboxes/task.html",
        {"issue": issue, "retirements": retirements, "leases": leases},
    )
