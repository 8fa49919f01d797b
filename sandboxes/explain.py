"""A record's holds and countdown in words, the same everywhere: the sandbox list,
its page, the approvals queue, the API and the notifications (docs/rules.md,
holds). The words are the ground floor's (`sandboxes.rules.holds.phrase`, one
text per hold code; `sandboxes.rules.countdown`); this module only reads the
plain values they need from a record and the rows it was loaded with
(`EXPLAIN_RELATED`: no query of its own)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from sandboxes.models import Receipt, Retirement
from sandboxes.rules.codes import HoldCode, Stage
from sandboxes.rules.countdown import Countdown, countdown
from sandboxes.rules.holds import phrase
from sandboxes.rules.proof import PROOF_KINDS

# What a record is loaded with so that explaining it costs no query.
EXPLAIN_RELATED = ("environment", "lease__issue", "lease__heartbeat_run")


def short(value, size: int = 8) -> str:
    text = str(value or "")
    return text if len(text) <= size + 2 else f"{text[:size]}…"


def when(moment: datetime) -> str:
    """ "Dec 2 16:09", in the console's time zone."""
    local = timezone.localtime(moment)
    return f"{local:%b} {local.day} {local:%H:%M}"


def when_zoned(moment: datetime) -> str:
    """ "Dec 9 09:00 UTC": `when` with the time zone's name, for a page read
    away from the console (a keep link's, docs/rules.md, kept by the owner)."""
    return f"{when(moment)} {timezone.localtime(moment).tzname()}"


def retention_ends(r) -> datetime | None:
    lease, env = getattr(r, "lease", None), getattr(r, "environment", None)
    if lease is None or env is None or lease.released_at is None or env.warm_retention is None:
        return None
    return lease.released_at + env.warm_retention


def window_opens(r, now: datetime | None = None) -> datetime | None:
    """When the record's retirement window next opens (None: no window)."""
    env = getattr(r, "environment", None)
    window = env.window if env is not None else None
    return window.next_opening(now or timezone.now()) if window is not None else None


def hold_phrase(code: str, r) -> str:
    """One hold of this record in words ("retention until Dec 2 16:09", "waiting
    for run 25dd… (running)", "held by alice: waiting for the owner (since …)",
    "outside the retirement window (opens Mon 09:00)", in the window's own time
    zone)."""
    opens = ""
    env = getattr(r, "environment", None) if code == HoldCode.OUTSIDE_WINDOW else None
    if env is not None and env.window is not None:
        opens = env.window.opens_words(timezone.now())
    lease = getattr(r, "lease", None)
    issue = getattr(lease, "issue", None) if lease is not None else None
    run = getattr(lease, "heartbeat_run", None) if lease is not None else None
    until = retention_ends(r) if code == HoldCode.RETENTION else None
    held_at = getattr(r, "operator_hold_at", None)
    held_until = getattr(r, "operator_hold_until", None)
    return phrase(
        code,
        reason=(getattr(r, "hold_reasons", None) or {}).get(code, ""),
        task=(issue.key or short(issue.pk)) if issue is not None else "the task",
        run=short(run.pk, 4) if run is not None else "",
        run_status=str(run.status).replace("_", " ") if run is not None else "",
        retention_until=when(until) if until is not None else "",
        operator_reason=getattr(r, "operator_hold_reason", "") or "",
        operator=getattr(r, "operator_hold_by", "") or "",
        operator_since=when(held_at) if held_at is not None else "",
        operator_until=when(held_until) if held_until is not None else "",
        window_opens=opens,
    )


def explained_holds(r) -> list[dict]:
    """Each hold of the record: its code and its phrase (`explanation`)."""
    return [{"code": code, "explanation": hold_phrase(code, r)} for code in (r.holds or [])]


def kept_since(r) -> datetime:
    """Since when the sandbox is kept: its lease's release, else its acquisition,
    else when the console listed it (the same as `kept_since_expression`)."""
    lease = r.lease
    return lease.released_at or lease.acquired_at or r.listed_at


def kept_since_expression():
    return Coalesce("lease__released_at", "lease__acquired_at", "listed_at")


def awaiting_since_expression():
    """When the record's newest proof came (it has awaited approval since): a
    subquery per row, over the receipts' retirement index."""
    newest = (
        Receipt.objects.filter(retirement=OuterRef("pk"), kind__in=list(PROOF_KINDS))
        .values("retirement")
        .annotate(at=Max("confirmed_at"))
        .values("at")
    )
    return Coalesce(Subquery(newest), "listed_at")


def with_glance(qs):
    """The list's annotations: `kept_since` and `awaiting_since`."""
    return qs.annotate(
        kept_since=kept_since_expression(), awaiting_since=awaiting_since_expression()
    )


def next_countdown(
    r: Retirement, now: datetime, awaiting_since: datetime | None = None
) -> Countdown | None:
    """The record's countdown (or wait), from the record and its loaded rows;
    `awaiting_since` from `with_glance` (else read here, one query)."""
    if awaiting_since is None and r.stage == Stage.AWAITING_APPROVAL:
        awaiting_since = getattr(r, "awaiting_since", None) or (
            Receipt.objects.filter(retirement=r, kind__in=list(PROOF_KINDS)).aggregate(
                at=Max("confirmed_at")
            )["at"]
            or r.listed_at
        )
    return countdown(
        stage=r.stage,
        holds=list(r.holds or []),
        now=now,
        retire_after=r.retire_after,
        next_attempt_at=r.next_attempt_at,
        awaiting_since=awaiting_since,
        hold_until=r.operator_hold_until,
        retention_ends=retention_ends(r),
        window_opens=window_opens(r, now) if HoldCode.OUTSIDE_WINDOW in (r.holds or []) else None,
    )
