"""GET/POST /api/v1/kept-sandboxes — the read-and-act API (README, the API):
operator-scope tokens read and act, reviewer-scope tokens read. Actions go
through `sandboxes.actions`, the same code path and audit rows as the
console's buttons; a salvage download is the console's own (sandboxes/views/salvage.py)."""

import uuid
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from sandboxes import actions
from sandboxes.explain import EXPLAIN_RELATED, explained_holds, kept_since
from sandboxes.ingest.schemas import TooDeep, decode_json
from sandboxes.models import Receipt, Retirement
from sandboxes.models.choices import HoldCode, RetirementKind, Stage, TokenScope
from sandboxes.paging import keyset_page
from sandboxes.rules.holds import explanation
from sandboxes.views.salvage import answer

from .auth import token_required

DEFAULT_LIMIT, MAX_LIMIT = 50, 200
MAX_REASON = 2000  # as the console's reason field (forms.ReasonForm)


def _iso(value):
    return value.isoformat() if value else None


def _company(r: Retirement) -> dict | None:
    company_id = r.lease.company_id
    if company_id is None:
        return None
    return {"id": str(company_id), "name": getattr(r, "company_name", None) or ""}


def summary(r: Retirement) -> dict:
    return {
        "sandbox_id": r.provider_lease_id,
        "provider": r.provider,
        "provider_state": r.provider_state or None,
        "lease_id": str(r.lease_id),
        # The lease's company (README, company scope), from `with_company`.
        "company": _company(r),
        "kind": r.kind,
        "stage": r.stage,
        # The hold codes, as DOMAIN §4.2 gives them; beside them each hold's
        # words for this record, as every page and notification says them
        # (sandboxes/explain.py).
        "holds": list(r.holds or []),
        "hold_explanations": explained_holds(r),
        # The rule's line for each hold (which condition Paperclip's predicate
        # refused a stop on, which recovery is open).
        "hold_reasons": {code: explanation(code, r.hold_reasons) for code in (r.holds or [])},
        "operator_hold": {
            "by": r.operator_hold_by or None,
            "reason": r.operator_hold_reason,
            "since": _iso(r.operator_hold_at),
            "until": _iso(r.operator_hold_until),
        }
        if r.operator_hold_reason
        else None,
        "kept_since": _iso(kept_since(r)),
        "attempts": r.attempts,
        "next_attempt_at": _iso(r.next_attempt_at),
        "needs_attention": r.needs_attention,
    }


def detail(r: Retirement) -> dict:
    receipts = Receipt.objects.of_sandbox(r.provider, r.provider_lease_id)
    return {
        **summary(r),
        "receipts": [
            {"kind": x.kind, "confirmed_at": _iso(x.confirmed_at), "payload": x.payload}
            for x in receipts
        ],
        "paperclip_uploads": [_upload(u) for u in r.paperclip_uploads.order_by("created_at")],
    }


def _upload(u) -> dict:
    """The export's attachment to the Paperclip task (docs/rules.md, salvage on the task)."""
    return {
        "export_receipt_id": str(u.export_receipt_id),
        "status": u.status,
        "words": u.words,
        "attempts": u.attempts,
        "last_error": u.last_error,
        "last_status_code": u.last_status_code,
        "next_attempt_at": _iso(u.next_attempt_at) if u.status != "attached" else None,
        "issue_id": str(u.issue_id),
        "company_id": str(u.company_id) if u.company_id else None,
        "attachment_ids": u.attachment_ids,
        "parts": u.parts,
    }


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


NOT_KEPT = "the console keeps no record of this sandbox"


def _bad(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


READERS = (TokenScope.OPERATOR, TokenScope.REVIEWER)


@require_GET
@token_required(*READERS)
def kept_sandboxes(request):
    params = request.GET
    stage = params.get("stage", "")
    if stage not in ("", "open", "all") and stage not in Stage.values:
        return _bad(f"unknown stage {stage!r}")
    if (kind := params.get("kind")) and kind not in RetirementKind.values:
        return _bad(f"unknown kind {kind!r}")
    if (code := params.get("hold")) and code not in HoldCode.values:
        return _bad(f"unknown hold {code!r}")
    if "\x00" in params.get("environment", ""):
        return _bad("environment cannot contain NUL characters")
    if (company := params.get("company")) and not _is_uuid(company):
        return _bad(f"company must be a company id (a uuid), not {company!r}")
    filters = {
        name: params.get(name, "") for name in ("stage", "kind", "hold", "environment", "company")
    }
    qs = (
        Retirement.objects.visible_to(request.api_token)
        .select_related(*EXPLAIN_RELATED)
        .with_company()
        .matching(filters)
    )
    try:
        limit = min(max(int(params.get("limit", DEFAULT_LIMIT)), 1), MAX_LIMIT)
    except ValueError:
        return _bad("limit must be an integer")
    page = keyset_page(
        qs, order="listed_at", cursor=params.get("cursor"), size=limit, param="cursor"
    )
    next_url = None
    if page.next_cursor:
        query = params.copy()
        query["cursor"] = page.next_cursor
        next_url = request.build_absolute_uri(
            f"{reverse('api-kept-sandboxes')}?{query.urlencode()}"
        )
    return JsonResponse({"results": [summary(r) for r in page.items], "next": next_url})


@require_GET
@token_required(*READERS)
def kept_sandbox(request, sandbox_id):
    r = Retirement.current_for_sandbox(sandbox_id, *EXPLAIN_RELATED, actor=request.api_token)
    if r is None:
        return _bad(NOT_KEPT, 404)
    return JsonResponse(detail(r))


@require_GET
@token_required(*READERS)
def salvage_zip(request, sandbox_id):
    """Everything salvaged from the sandbox, one streamed zip with MANIFEST.json."""
    if not actions.can(request.api_token, "download_salvage"):
        return _bad("download salvage is not allowed for this token", 403)
    r = Retirement.current_for_sandbox(
        sandbox_id,
        "environment",
        "lease__issue",
        "lease__heartbeat_run",
        actor=request.api_token,
    )
    if r is None:
        return _bad(NOT_KEPT, 404)
    response, refusal = answer(r, actor=request.api_token, via="api")
    if response is not None:
        return response
    status, message, found = refusal
    return JsonResponse({"error": message, "problems": found}, status=status)


ACTIONS = {
    "approve": actions.approve,
    "retry": actions.retry,
    "hold": actions.hold,
    "release-hold": actions.release_hold,
}


@csrf_exempt  # machine clients authenticate with a bearer token, not a session
def act(request, sandbox_id, action):
    """POST …/{id}/{verb} acts. A sandbox id may hold slashes (an SSH sandbox is
    "ssh://host/path"), so a GET whose last segment is not a verb reads the
    sandbox the whole path names."""
    if request.method in ("GET", "HEAD") and action not in ACTIONS:
        return kept_sandbox(request, f"{sandbox_id}/{action}")
    return _act(request, sandbox_id, action)


@require_POST
@token_required(TokenScope.OPERATOR)
def _act(request, sandbox_id, action):
    call = ACTIONS.get(action)
    if call is None:
        return _bad(f"unknown action {action!r}", 404)
    try:
        body = decode_json(request.body or b"{}")
    except TooDeep as exc:
        return _bad(f"body: JSON {exc}")
    except (ValueError, UnicodeDecodeError):
        return _bad("body is not valid JSON")
    reason = body.get("reason") if isinstance(body, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        return _bad('a non-empty "reason" is required')
    if len(reason) > MAX_REASON:
        return _bad(f'"reason" is at most {MAX_REASON} characters ({len(reason)} given)')
    extra = {}
    if action == "hold":
        until, error = _until(body)
        if error:
            return _bad(error)
        extra["until"] = until
    r = Retirement.current_for_sandbox(sandbox_id, actor=request.api_token)
    if r is None:
        return _bad(NOT_KEPT, 404)
    try:
        call(r.pk, actor=request.api_token, reason=reason, **extra)
    except PermissionDenied as exc:
        return _bad(str(exc) or "not allowed", 403)
    except actions.BadInput as exc:
        return _bad(str(exc))
    except actions.ActionRefused as exc:
        return _bad(str(exc), 409)
    r = Retirement.objects.select_related(*EXPLAIN_RELATED).with_company().get(pk=r.pk)
    return JsonResponse(detail(r))


def _until(body: dict) -> tuple[datetime | None, str]:
    """A hold's optional "until" (ISO 8601 with a time zone), or why not."""
    raw = body.get("until")
    if raw is None:
        return None, ""
    if not isinstance(raw, str):
        return None, '"until" is an ISO 8601 time, like "2026-12-24T18:00:00Z"'
    try:
        until = parse_datetime(raw.strip())
    except ValueError:
        until = None
    if until is None:
        return None, '"until" is an ISO 8601 time, like "2026-12-24T18:00:00Z"'
    if until.tzinfo is None:
        return None, '"until" needs its time zone (a "Z" for UTC)'
    return until, ""
