"""POST /api/v1/events — Paperclip runtimes push their rows here
(docs/architecture.md, how a lease travels)."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from sandboxes.ingest import apply_events, validate_batch
from sandboxes.ingest.apply import BatchRejected
from sandboxes.ingest.pause import collection_paused
from sandboxes.ingest.schemas import (
    Event,
    TooDeep,
    decode_json,
    fast_validate_body,
    may_hold_unstorable_text,
)
from sandboxes.models.choices import TokenScope

from .auth import token_required


def _error(status: int, message: str, path: str = "(body)") -> JsonResponse:
    return JsonResponse(
        {"errors": [{"index": None, "path": path, "message": message}]}, status=status
    )


@csrf_exempt  # machine clients authenticate with a bearer token, not a session
@require_POST
@token_required(TokenScope.INGEST)
def events(request):
    content_type = request.content_type or ""
    if content_type != "application/json":
        return _error(415, f"Content-Type must be application/json, not {content_type!r}")
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > settings.INGEST_MAX_BYTES:
        return _error(413, f"body is larger than {settings.INGEST_MAX_BYTES} bytes")
    try:
        body = request.body
    except RequestDataTooBig:
        body = b"x" * (settings.INGEST_MAX_BYTES + 1)
    if len(body) > settings.INGEST_MAX_BYTES:
        return _error(413, f"body is larger than {settings.INGEST_MAX_BYTES} bytes")
    with collection_paused():
        return _ingest(request, body)


def _ingest(request, body: bytes) -> JsonResponse:
    """Validate and apply one body (`events`' checks of the request passed)."""
    batch = fast_validate_body(body, max_events=settings.INGEST_MAX_EVENTS)
    if batch is None:
        # Something is amiss: the detailed path names it (and its messages are the contract).
        response = _validate(body)
        if isinstance(response, JsonResponse):
            return response
        batch = response
    try:
        result = apply_events(f"token:{request.api_token.pk}", batch, actor=request.api_token)
    except BatchRejected as rejected:
        return JsonResponse({"errors": [e.as_dict() for e in rejected.errors]}, status=400)
    return JsonResponse(
        {
            "accepted": result.accepted,
            "duplicates": result.duplicates,
            "warnings": [w.as_dict() for w in result.warnings],
        }
    )


def _validate(body: bytes) -> list[Event] | JsonResponse:
    """The detailed validation: the events, or the answer naming what is wrong."""
    try:
        payload = decode_json(body)
    except TooDeep as exc:
        return _error(400, f"JSON {exc}", exc.path)
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"body is not valid JSON: {exc}")

    raw_events = payload.get("events") if isinstance(payload, dict) else None
    if isinstance(raw_events, list) and len(raw_events) > settings.INGEST_MAX_EVENTS:
        return _error(413, f"at most {settings.INGEST_MAX_EVENTS} events per batch", "events")

    batch, errors = validate_batch(
        payload,
        max_events=settings.INGEST_MAX_EVENTS,
        check_text=may_hold_unstorable_text(body),
    )
    if errors:
        return JsonResponse({"errors": [e.as_dict() for e in errors]}, status=400)
    return batch
