"""Download everything salvaged from a sandbox as one streamed zip: the detail
page's link here, the API's `…/salvage.zip` through `answer` (docs/architecture.md,
restore a salvage). Every download, and every refusal, is an audit row."""

import logging
import re

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from sandboxes import audit
from sandboxes.models import Retirement
from sandboxes.salvage_archive import SalvageCorrupt, problems, salvage_of, stream_zip
from sandboxes.views.common import console_view, permission

log = logging.getLogger(__name__)

NOTHING = "Nothing was salvaged from this sandbox: it has no verified export."
REFUSED = "The salvage cannot be downloaded: what is stored does not match its export receipts."


def _filename(r: Retirement) -> str:
    return (
        "salvage-"
        + (re.sub(r"[^A-Za-z0-9._-]+", "_", r.provider_lease_id)[:80] or "sandbox")
        + ".zip"
    )


def _guarded(chunks, r: Retirement):
    """The zip's chunks; an object that stops verifying mid-stream is logged and
    ends the stream without the zip's central directory (not a readable zip)."""
    try:
        yield from chunks
    except SalvageCorrupt as exc:
        log.error("salvage download stopped: %s", exc, extra={"lease_id": str(r.lease_id)})
        raise


def answer(r: Retirement, *, actor, via: str):
    """(response, None) to stream, or (None, (status, message, problems)) to refuse."""
    salvage = salvage_of(r)
    if salvage.empty:
        return None, (404, NOTHING, [])
    found = problems(salvage)
    summary = {
        "via": via,
        "exports": [str(x.pk) for x in salvage.exports],
        "files": len(salvage.files),
        "bytes": salvage.bytes,
    }
    if found:
        audit.record(
            actor=actor,
            action="salvage.download_refused",
            obj=r,
            reason=found[0][:500],
            after={**summary, "problems": found[:20]},
        )
        return None, (409, REFUSED, found)
    audit.record(actor=actor, action="salvage.download", obj=r, after=summary)
    response = StreamingHttpResponse(
        _guarded(stream_zip(salvage), r), content_type="application/zip"
    )
    response["Content-Disposition"] = f'attachment; filename="{_filename(r)}"'
    response["Cache-Control"] = "no-store"
    return response, None


@console_view
@require_GET
@permission("download_salvage")
def salvage_zip(request, pk):
    r = get_object_or_404(
        Retirement.objects.visible_to(request.user).select_related(
            "environment", "lease__issue", "lease__heartbeat_run"
        ),
        pk=pk,
    )
    response, refusal = answer(r, actor=request.user, via="console")
    if response is not None:
        return response
    status, message, found = refusal
    context = {"r": r, "message": message, "problems": found}
    return render(request, "sandboxes/salvage_refused.html", context, status=status)
