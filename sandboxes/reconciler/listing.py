"""Listing: turn the candidate query into Retirement records with their holds.

A fixed number of queries at any fleet size: the candidate query, the open
records, one re-judge of records whose lease is not a current candidate, and
bulk writes. What the listing does to each record is decided on the ground
floor (`sandboxes/rules/listing.py:decide_listing`, which the policy preview
asks too); this module reads, then writes that answer, claimed records left to
their worker. The sync also reports when its answer would change with the
clock alone (`SyncResult.due_at`), so a pass over an unchanged fleet can reuse
it (sandboxes/reconciler/changes.py).
"""

from __future__ import annotations

import gc
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from sandboxes.models import AuditEvent, Retirement
from sandboxes.models.choices import STAGES_CLOSED, Stage
from sandboxes.rules.holds import NEEDS_STOP_RECEIPT, blocking_holds, compute_holds
from sandboxes.rules.listing import (
    RECORD_FIELDS,
    Candidate,
    Does,
    Listed,
    changes_at,
    decide_listing,
    to_rejudge,
)
from sandboxes.rules.next_step import Sync

from . import new_records
from .candidates import judge_leases, list_candidates
from .predicates import stop_refusals


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    holds: list[str]

    @property
    def blocking(self) -> list[str]:
        return blocking_holds(self.holds, self.candidate.kind)


def _open_records(environment_id=None) -> list[dict]:
    """The open records as decide_listing reads them, each with its
    environment's retirement mode."""
    qs = Retirement.objects.open()
    if environment_id is not None:
        qs = qs.filter(environment_id=environment_id)
    return list(qs.values(*RECORD_FIELDS, mode=F("environment__retirement_mode")))


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
    # The records this sync listed (created) and dismissed, for the pass's page.
    listed_ids: list = field(default_factory=list)
    dismissed_ids: list = field(default_factory=list)
    held: int = 0
    released: int = 0
    by_kind: dict = field(default_factory=dict)
    # The earliest moment this sync's answer changes with the clock alone (a
    # warm retention ending, a claim expiring); None if nothing is timed.
    due_at: datetime | None = None


@dataclass
class _Plan:
    """What one sync writes, gathered from the listing's decision before any write."""

    # The new records' fields (new_records.LISTED_FIELDS), not model instances:
    # on PostgreSQL they go to the database as one document.
    creates: list[dict] = field(default_factory=list)
    updates: list[Retirement] = field(default_factory=list)
    to_hold: list = field(default_factory=list)
    # Held by the retirement window alone: {record id: when it opens}.
    to_wait_window: dict = field(default_factory=dict)
    to_release: list = field(default_factory=list)
    to_wake: list = field(default_factory=list)
    to_dismiss: dict = field(default_factory=dict)

    @classmethod
    def of(cls, decisions: list[Listed]) -> _Plan:
        plan = cls()
        ids = iter(new_records.new_ids(sum(d.does is Does.CREATE for d in decisions)))
        for d in decisions:
            rec = d.record
            if d.does is Does.CREATE:
                plan.creates.append(_new_record(d, next(ids)))
            elif d.does is Does.DISMISS and rec is not None:
                plan.to_dismiss[rec["id"]] = d.reason
            elif d.does is Does.WAKE and rec is not None:
                plan.to_wake.append(rec["id"])  # its worker stops the started sandbox first
            elif d.does is Does.TRACK and rec is not None:
                if d.rewrite:
                    plan.updates.append(
                        Retirement(
                            pk=rec["id"], holds=list(d.holds), hold_reasons=d.reasons, kind=d.kind
                        )
                    )
                if d.window_opens is not None:
                    if d.sync is Sync.HOLD or rec["next_attempt_at"] != d.window_opens:
                        plan.to_wait_window[rec["id"]] = d.window_opens
                elif d.sync is Sync.HOLD:
                    plan.to_hold.append(rec["id"])
                elif d.sync is Sync.RELEASE:
                    plan.to_release.append(rec["id"])
                elif d.sync is Sync.WAKE:
                    plan.to_wake.append(rec["id"])  # a started sandbox: its worker stops it first
        return plan


@contextmanager
def _without_gc():
    """No cyclic garbage collection during a sync. A first sync at 1M leases
    allocates ~100,000 short-lived objects (rows, facts, decisions) that form
    no cycles; the collector ran ~90 times meanwhile, once over every live
    object of the process, ~0.1 s of the sync. Reference counting frees them
    as before, and the collector runs again after (it was off already: left
    off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def sync_retirements(environment_id=None, now: datetime | None = None) -> SyncResult:
    with _without_gc():
        return _sync(environment_id, now)


def _sync(environment_id, now: datetime | None) -> SyncResult:
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
    # Records not backed by a current candidate row: re-judge their own lease.
    judged = judge_leases(to_rejudge(records, candidates))
    refusals = _stop_refusals([*candidates, *judged.values()])
    decisions = decide_listing(records, candidates, judged, now, refusals=refusals)
    _write(_Plan.of(decisions), result, now)
    for c in candidates:
        result.by_kind[c.kind] = result.by_kind.get(c.kind, 0) + 1
    result.due_at = changes_at(now, candidates, judged.values(), records)
    return result


def _new_record(d: Listed, pk: uuid.UUID) -> dict:
    """A created record's fields (new_records.LISTED_FIELDS), `pk` its id."""
    cand = d.candidate
    assert cand is not None  # a created record has its candidate
    return {
        "id": pk,
        "lease_id": cand.lease_id,
        "environment_id": cand.environment_id,
        "provider": cand.provider,
        "provider_lease_id": cand.provider_lease_id,
        "kind": d.kind,
        "stage": d.stage,
        "holds": list(d.holds),
        "hold_reasons": d.reasons,
        "next_attempt_at": d.due_at,
    }


def _stop_refusals(candidates: list[Candidate]) -> dict:
    """{lease id: why Paperclip's predicate refuses its stop} for the candidates
    of a kind that needs a confirmed stop and has none (the no_stop_receipt
    hold says which condition failed). 2 queries, only for those leases."""
    ids = [
        c.lease_id
        for c in candidates
        if c.kind in NEEDS_STOP_RECEIPT and not c.facts.has_stop_receipt
    ]
    return stop_refusals(ids)


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
    if plan.to_wait_window:
        result.held += _wait_for_window(plan.to_wait_window, unclaimed, now)
    if plan.to_release:
        result.released = Retirement.objects.filter(
            unclaimed, pk__in=plan.to_release, stage=Stage.HELD
        ).update(stage=Stage.LISTED, next_attempt_at=now, updated_at=now)
    if plan.to_wake:
        Retirement.objects.filter(unclaimed, pk__in=plan.to_wake).exclude(
            stage__in=(*STAGES_CLOSED, Stage.HELD)
        ).update(next_attempt_at=now, updated_at=now)
    if plan.to_dismiss:
        result.dismissed_ids = _dismiss(plan.to_dismiss, now, unclaimed)
        result.dismissed = len(result.dismissed_ids)
    result.listed_ids = new_records.create(plan.creates)
    result.created = len(result.listed_ids)


def _wait_for_window(opens: dict, unclaimed: Q, now) -> int:
    """Records the retirement window alone holds: held until it opens. Their
    notice stands (the window closing is no reason to tell the owner again,
    docs/rules.md, the retirement window). One statement per opening: the
    records of one environment share it."""
    by_opening: dict = {}
    for pk, at in opens.items():
        by_opening.setdefault(at, []).append(pk)
    held = 0
    for at, ids in by_opening.items():
        held += (
            Retirement.objects.filter(unclaimed, pk__in=ids, started_for_salvage=False)
            .open()
            .update(stage=Stage.HELD, next_attempt_at=at, updated_at=now)
        )
    return held


def _dismiss(reasons: dict, now, unclaimed: Q) -> list[str]:
    """Close the records as dismissed (those not claimed meanwhile); returns their ids."""
    with transaction.atomic():
        rows = list(
            Retirement.objects.select_for_update(skip_locked=True)
            .filter(unclaimed, pk__in=list(reasons), started_for_salvage=False)
            .open()
            .values("id", "stage", "kind", "provider_lease_id")
        )
        if not rows:
            return []
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
    return [str(pk) for pk in ids]
