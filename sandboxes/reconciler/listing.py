"""Listing: turn the candidate query into Retirement records with their holds.

A fixed number of queries at any fleet size: the candidate query, the open
records, one re-judge of records whose lease is not a current candidate, and
bulk writes. Claimed records are left to their worker. The sync also reports
when its answer would change with the clock alone (`SyncResult.due_at`), so a
pass over an unchanged fleet can reuse it (sandboxes/reconciler/changes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import STAGES_CLOSED, Stage
from sandboxes.rules.holds import (
    NEEDS_STOP_RECEIPT,
    blocking_holds,
    compute_holds,
    explain,
    holds_change_at,
)
from sandboxes.rules.next_step import Sync, new_record_state, sync_step

from .candidates import LEASE_MOVED, Candidate, judge_leases, list_candidates
from .predicates import stop_refusals

OPEN_FIELDS = (
    "id",
    "lease_id",
    "provider",
    "provider_lease_id",
    "kind",
    "stage",
    "holds",
    "hold_reasons",
    "operator_hold_reason",
    "started_for_salvage",
    "next_attempt_at",
    "claimed_until",
    "environment__retirement_mode",
)


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    holds: list[str]

    @property
    def blocking(self) -> list[str]:
        return blocking_holds(self.holds, self.candidate.kind)


def _open_records(environment_id=None) -> list[dict]:
    qs = Retirement.objects.open()
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return list(qs.values(*OPEN_FIELDS))


def _operator_holds(environment_id=None) -> dict[tuple[str, str], str]:
    """The open records an operator holds, by sandbox: the only record field
    hold evaluation reads (the rest of a record is the sync's business)."""
    qs = Retirement.objects.open().exclude(operator_hold_reason="")
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    rows = qs.values_list("provider", "provider_lease_id", "operator_hold_reason")
    return {(provider, sandbox): reason for provider, sandbox, reason in rows}


def evaluate_fleet(environment_id=None, now: datetime | None = None) -> list[Evaluated]:
    """Listing plus hold evaluation, read-only: 2 queries at any size."""
    now = now or timezone.now()
    candidates = list_candidates(environment_id)
    operator = _operator_holds(environment_id)
    return [
        Evaluated(
            c,
            compute_holds(
                c.facts,
                c.kind,
                operator_hold_reason=operator.get((c.provider, c.provider_lease_id), ""),
                now=now,
            ),
        )
        for c in candidates
    ]


@dataclass
class SyncResult:
    candidates: int = 0
    created: int = 0
    dismissed: int = 0
    held: int = 0
    released: int = 0
    by_kind: dict = field(default_factory=dict)
    # The earliest moment this sync's answer changes with the clock alone (a
    # warm retention ending, a claim expiring); None if nothing is timed.
    due_at: datetime | None = None


def _claimed(rec: dict, now) -> bool:
    return rec["claimed_until"] is not None and rec["claimed_until"] > now


@dataclass
class _Plan:
    """What one sync writes, gathered before any write."""

    creates: list[Retirement] = field(default_factory=list)
    updates: list[Retirement] = field(default_factory=list)
    to_hold: list = field(default_factory=list)
    to_release: list = field(default_factory=list)
    to_wake: list = field(default_factory=list)
    to_dismiss: dict = field(default_factory=dict)
    # Why Paperclip's predicate refuses the stop of each lease held no_stop_receipt.
    refusals: dict = field(default_factory=dict)


def sync_retirements(environment_id=None, now: datetime | None = None) -> SyncResult:
    now = now or timezone.now()
    result = SyncResult()
    # Open records FIRST, candidates second. The listing is two statements, and
    # another worker may retire a sandbox between them (record → retired and
    # lease → expired, in one transaction). Read the other way round, the
    # candidate read could predate that commit (lease still a candidate) and the
    # record read follow it (no open record): a second record would be created
    # for a destroyed sandbox, and later dismissed (chaos seed 100). In this
    # order a retirement committed before the record read is also seen by the
    # candidate read, so the expired lease is not a candidate any more.
    records = _open_records(environment_id)
    candidates = list_candidates(environment_id)
    result.candidates = len(candidates)
    by_sandbox = {(r["provider"], r["provider_lease_id"]): r for r in records}
    cand_by_sandbox = {(c.provider, c.provider_lease_id): c for c in candidates}

    # Records not backed by a current candidate row: re-judge their own lease.
    rejudge = [
        r["lease_id"]
        for key, r in by_sandbox.items()
        if key not in cand_by_sandbox or cand_by_sandbox[key].lease_id != r["lease_id"]
    ]
    judged = judge_leases(rejudge)

    plan = _Plan(refusals=_stop_refusals([*candidates, *judged.values()]))
    _plan_candidates(plan, by_sandbox, cand_by_sandbox, now)
    _plan_rejudged(plan, by_sandbox, cand_by_sandbox, judged, now)
    _write(plan, result, now)
    for c in candidates:
        result.by_kind[c.kind] = result.by_kind.get(c.kind, 0) + 1
    result.due_at = _due_at(now, candidates, judged.values(), records)
    return result


def _track(plan: _Plan, rec: dict, cand: Candidate, kind: str, now) -> None:
    holds = compute_holds(
        cand.facts, kind, operator_hold_reason=rec["operator_hold_reason"], now=now
    )
    reasons = explain(holds, cand.facts, rec["hold_reasons"], plan.refusals.get(cand.lease_id, ""))
    if holds != rec["holds"] or kind != rec["kind"] or reasons != rec["hold_reasons"]:
        plan.updates.append(Retirement(pk=rec["id"], holds=holds, hold_reasons=reasons, kind=kind))
    step = sync_step(
        stage=rec["stage"],
        blocking=blocking_holds(holds, kind),
        mode=rec["environment__retirement_mode"],
        started=rec["started_for_salvage"],
        next_attempt_at=rec["next_attempt_at"],
        claimed=_claimed(rec, now),
    )
    if step == Sync.HOLD:
        plan.to_hold.append(rec["id"])
    elif step == Sync.RELEASE:
        plan.to_release.append(rec["id"])
    elif step == Sync.WAKE:
        plan.to_wake.append(rec["id"])  # a started sandbox: its worker stops it first


def _plan_candidates(plan: _Plan, by_sandbox: dict, cand_by_sandbox: dict, now) -> None:
    """Each current candidate: track its record, give way to it, or create one."""
    for key, cand in cand_by_sandbox.items():
        if cand.kind is None:
            continue  # never: the candidate query lists rows that match a kind
        rec = by_sandbox.get(key)
        if rec is not None and rec["lease_id"] == cand.lease_id:
            _track(plan, rec, cand, cand.kind, now)
            continue
        if rec is not None:
            # A newer lease row on this sandbox is itself a candidate: the old
            # record gives way, and the newest row is listed on the next pass.
            if not _claimed(rec, now) and not rec["started_for_salvage"]:
                plan.to_dismiss[rec["id"]] = (
                    "a newer lease row on this sandbox is the candidate now"
                )
            continue
        plan.creates.append(_new_record(cand, cand.kind, now, plan.refusals.get(cand.lease_id, "")))


def _new_record(cand: Candidate, kind: str, now, stop_refusal: str = "") -> Retirement:
    holds = compute_holds(cand.facts, kind, now=now)
    stage, due = new_record_state(
        blocking=blocking_holds(holds, kind), mode=cand.retirement_mode, now=now
    )
    return Retirement(
        lease_id=cand.lease_id,
        environment_id=cand.environment_id,
        provider=cand.provider,
        provider_lease_id=cand.provider_lease_id,
        kind=kind,
        stage=stage,
        holds=holds,
        hold_reasons=explain(holds, cand.facts, stop_refusal=stop_refusal),
        next_attempt_at=due,
    )


def _stop_refusals(candidates) -> dict:
    """{lease id: why Paperclip's predicate refuses its stop} for the candidates
    of a kind that needs a confirmed stop and has none (the no_stop_receipt
    hold says which condition failed). 2 queries, only for those leases."""
    ids = [
        c.lease_id
        for c in candidates
        if c.kind in NEEDS_STOP_RECEIPT and not c.facts.has_stop_receipt
    ]
    return stop_refusals(ids)


def _plan_rejudged(plan: _Plan, by_sandbox: dict, cand_by_sandbox: dict, judged: dict, now) -> None:
    """Each open record with no current candidate row, by its re-judged lease."""
    for key, rec in by_sandbox.items():
        if key in cand_by_sandbox:
            continue
        judged_row = judged.get(rec["lease_id"])
        if judged_row is None:
            continue  # graph has placeholders again: leave it as it is
        moved = not judged_row.names(*key)
        if judged_row.kind is None or moved:
            # A moved lease's facts describe the sandbox it names now, never this
            # record's: the record closes, and that sandbox is listed on its own.
            if _claimed(rec, now):
                continue
            if rec["started_for_salvage"]:
                plan.to_wake.append(rec["id"])
            else:
                plan.to_dismiss[rec["id"]] = (
                    LEASE_MOVED
                    if moved
                    else "no longer a candidate (the predicate stopped matching)"
                )
            continue
        _track(plan, rec, judged_row, judged_row.kind, now)


def _write(plan: _Plan, result: SyncResult, now) -> None:
    """The plan's bulk writes, claimed records left to their worker."""
    if plan.updates:
        Retirement.objects.bulk_update(
            plan.updates, ["holds", "hold_reasons", "kind"], batch_size=None
        )
    unclaimed = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
    if plan.to_hold:
        result.held = (
            Retirement.objects.filter(unclaimed, pk__in=plan.to_hold, started_for_salvage=False)
            .open()
            # A hold stops a running notice (rules.next_step.notice_valid).
            .update(
                stage=Stage.HELD,
                next_attempt_at=None,
                retire_after=None,
                notice_proof="",
                updated_at=now,
            )
        )
    if plan.to_release:
        result.released = Retirement.objects.filter(
            unclaimed, pk__in=plan.to_release, stage=Stage.HELD
        ).update(stage=Stage.LISTED, next_attempt_at=now, updated_at=now)
    if plan.to_wake:
        Retirement.objects.filter(unclaimed, pk__in=plan.to_wake).exclude(
            stage__in=(*STAGES_CLOSED, Stage.HELD)
        ).update(next_attempt_at=now, updated_at=now)
    if plan.to_dismiss:
        result.dismissed = _dismiss(plan.to_dismiss, now, unclaimed)
    result.created = _create(plan.creates)


def _create(creates: list[Retirement]) -> int:
    if creates:
        # Belt and braces: a lease whose sandbox was retired is never listed
        # again on that sandbox (a lease moved since names another one).
        retired = set(
            Retirement.objects.filter(
                lease_id__in=[c.lease_id for c in creates], stage=Stage.RETIRED
            ).values_list("lease_id", "provider", "provider_lease_id")
        )
        creates = [
            c for c in creates if (c.lease_id, c.provider, c.provider_lease_id) not in retired
        ]
    if creates:
        return len(Retirement.objects.bulk_create(creates, ignore_conflicts=True, batch_size=None))
    return 0


def _due_at(now: datetime, candidates, judged, records) -> datetime | None:
    """When this listing's answer changes with the clock alone: the first warm
    retention to end among the rows it judged, or the first claim to expire
    among the records it left to their worker (docs/rules.md, holds)."""
    times = [holds_change_at(c.facts, c.kind, now=now) for c in candidates]
    times += [holds_change_at(c.facts, c.kind, now=now) for c in judged]
    times += [r["claimed_until"] for r in records if _claimed(r, now)]
    return min((t for t in times if t is not None), default=None)


def _dismiss(reasons: dict, now, unclaimed: Q) -> int:
    with transaction.atomic():
        rows = list(
            Retirement.objects.select_for_update(skip_locked=True)
            .filter(unclaimed, pk__in=list(reasons), started_for_salvage=False)
            .open()
            .values("id", "stage", "kind", "provider_lease_id")
        )
        if not rows:
            return 0
        ids = [r["id"] for r in rows]
        reason_of = {r["id"]: reasons[r["id"]] for r in rows}
        Retirement.objects.filter(pk__in=ids).update(
            stage=Stage.DISMISSED, closed_at=now, next_attempt_at=None, updated_at=now
        )
        for reason in set(reason_of.values()):  # a handful of distinct reasons
            Retirement.objects.filter(
                pk__in=[pk for pk, why in reason_of.items() if why == reason]
            ).update(closed_reason=reason)
        AuditEvent.objects.bulk_create(
            [
                AuditEvent(
                    actor=None,
                    actor_label="system",
                    action="retirement.dismissed",
                    object_type="retirement",
                    object_id=str(r["id"]),
                    sandbox_id=r["provider_lease_id"],
                    reason=reason_of[r["id"]],
                    before={"stage": r["stage"]},
                    after={"stage": Stage.DISMISSED, "kind": r["kind"]},
                )
                for r in rows
            ]
        )
    return len(rows)
