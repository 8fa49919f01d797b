"""What a listing does to each open record and each candidate: one pure decision
(docs/architecture.md, step 4; docs/rules.md, which rows are judged).

`decide_listing` takes the open records (plain dicts), the candidates and the
re-judged leases of the records that have no current candidate row, and says
for each sandbox what the listing does: create its record, track the record
(its holds, kind and stage follow its lease's row), dismiss it, wake it, or
leave it to its worker. `sync_retirements` (sandboxes/reconciler/listing.py)
writes the answer; the policy preview (sandboxes/reconciler/preview.py) counts
it, so the two cannot disagree.

A record dict holds the Retirement fields of `RECORD_FIELDS`; its environment's
retirement mode is `mode` unless the caller decides under another policy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .codes import STAGES_CLOSED, Stage
from .frozen import build
from .holds import (
    LeaseFacts,
    blocking_holds,
    compute_holds,
    explain,
    holds_change_at,
    window_opens,
)
from .next_step import Sync, new_record_state, sync_step
from .window import Window


class Each(StrEnum):
    """decide_listing's `window` when no other is proposed: each candidate's own."""

    ENVIRONMENT = "each environment's own"


# What the decision reads of an open record.
RECORD_FIELDS = (
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
)

# Why a record closes when its lease row is re-sent naming another sandbox: the
# row now describes that sandbox, which is listed on its own (docs/rules.md, holds).
LEASE_MOVED = "the lease now names another sandbox"
# Why a record closes when its lease stopped matching a candidate kind (the
# task resumed it), at listing and under the claim's lock.
NOT_A_CANDIDATE = "no longer a candidate (the predicate stopped matching)"
# Why a record closes when a newer lease row on its sandbox is itself a candidate.
NEWER_ROW = "a newer lease row on this sandbox is the candidate now"


@dataclass(frozen=True)
class Candidate:
    """A lease row as judged: its sandbox, its kind (None: it matches none) and
    the facts its holds need (sandboxes/reconciler/candidates.py reads them)."""

    lease_id: uuid.UUID
    provider: str
    provider_lease_id: str
    environment_id: uuid.UUID
    retirement_mode: str
    kind: str | None
    facts: LeaseFacts

    def names(self, provider: str, provider_lease_id: str) -> bool:
        """Whether the judged lease row still names this sandbox: its facts are
        about the sandbox the row names now, and only then about this one."""
        return (self.provider, self.provider_lease_id) == (provider, provider_lease_id)


class Does(StrEnum):
    """What the listing does to one sandbox."""

    CREATE = "create"  # a candidate without an open record: its record is created
    TRACK = "track"  # the record follows its lease's row: holds, kind and stage (`sync`)
    DISMISS = "dismiss"  # its lease is no longer the candidate: the record closes (`reason`)
    WAKE = "wake"  # no longer a candidate, but its sandbox was started: due now, stopped first
    LEAVE = "leave"  # left as it is: a worker holds it, or its lease's graph has placeholders


@dataclass(frozen=True)
class Listed:
    """What the listing does to one sandbox, and the record's state after it."""

    does: Does
    sandbox: tuple[str, str]
    record: Mapping[str, Any] | None  # the open record; None: created now
    kind: str
    holds: tuple = ()
    blocking: tuple = ()
    reasons: dict = field(default_factory=dict)  # each hold's line (CREATE, TRACK)
    sync: Sync | None = None  # TRACK: what sync_step says
    stage: str = ""  # after the listing
    due_at: datetime | None = None  # next_attempt_at after the listing
    claimed: bool = False  # a worker holds the record: it is left to that worker
    reason: str = ""  # DISMISS: why, in words
    candidate: Candidate | None = None  # CREATE, TRACK: the lease row judged
    # Held by the retirement window alone: when it opens (the record's
    # next_attempt_at; its notice, if it had one, stands).
    window_opens: datetime | None = None

    @property
    def rewrite(self) -> bool:
        """TRACK: whether the record's stored holds, lines or kind change."""
        rec = self.record
        return rec is not None and (
            list(self.holds) != rec["holds"]
            or self.kind != rec["kind"]
            or self.reasons != rec["hold_reasons"]
        )

    def due(self, now: datetime) -> bool:
        """Whether the pass claims it after this listing: `Retirement.objects.due`
        (a workable stage whose time has come, or a held record with a sandbox
        it started), unclaimed, on the state the listing leaves."""
        if self.claimed or self.does in (Does.DISMISS, Does.LEAVE):
            return False
        if self.stage == Stage.HELD:
            return bool(self.record and self.record["started_for_salvage"])
        return self.due_at is not None and self.due_at <= now


def claimed(rec: Mapping[str, Any], now: datetime) -> bool:
    return rec["claimed_until"] is not None and rec["claimed_until"] > now


def _sandbox(rec: Mapping[str, Any]) -> tuple[str, str]:
    return (rec["provider"], rec["provider_lease_id"])


def to_rejudge(records: Iterable[Mapping[str, Any]], candidates: Iterable[Candidate]) -> list:
    """The leases of open records with no current candidate row: the record's
    sandbox has none, or it is another lease's. Their leases are judged again."""
    current = {(c.provider, c.provider_lease_id): c.lease_id for c in candidates}
    return [r["lease_id"] for r in records if current.get(_sandbox(r)) != r["lease_id"]]


@dataclass(frozen=True)
class _Judge:
    """Holds and stages under one policy: the environments' own (`mode` None,
    the facts' retention), or a proposed one (the policy preview)."""

    now: datetime
    refusals: Mapping
    mode: str | None
    warm_retention: timedelta | None
    window: Window | None | Each = Each.ENVIRONMENT

    def facts(self, cand: Candidate) -> LeaseFacts:
        """The candidate's facts under the policy judged: a proposed retention or
        window replaces the environment's."""
        facts = cand.facts
        if self.warm_retention is not None and facts.warm_retention != self.warm_retention:
            facts = replace(facts, warm_retention=self.warm_retention)
        if not isinstance(self.window, Each) and facts.window != self.window:
            facts = replace(facts, window=self.window)
        return facts

    def holds(self, cand: Candidate, kind: str, operator_hold_reason: str = "") -> list[str]:
        facts = self.facts(cand)
        return compute_holds(facts, kind, operator_hold_reason=operator_hold_reason, now=self.now)

    def track(self, rec: Mapping[str, Any], cand: Candidate, kind: str) -> Listed:
        """An open record of the candidate's lease: its holds recomputed, an
        operator's own hold line kept, and what sync_step does to its stage."""
        holds = self.holds(cand, kind, rec["operator_hold_reason"])
        blocking = blocking_holds(holds, kind)
        refusal = self.refusals.get(cand.lease_id, "")
        reasons = explain(holds, self.facts(cand), rec["hold_reasons"], refusal)
        is_claimed = claimed(rec, self.now)
        sync = sync_step(
            stage=rec["stage"],
            blocking=blocking,
            mode=rec["mode"] if self.mode is None else self.mode,
            started=rec["started_for_salvage"],
            next_attempt_at=rec["next_attempt_at"],
            claimed=is_claimed,
        )
        stage, due = rec["stage"], rec["next_attempt_at"]
        opens = None
        if sync is Sync.HOLD:
            stage, due = Stage.HELD, None  # a hold stops a running notice too
        elif sync is Sync.RELEASE:
            stage, due = Stage.LISTED, self.now
        elif sync is Sync.WAKE and stage not in (*STAGES_CLOSED, Stage.HELD):
            due = self.now
        if stage == Stage.HELD and not is_claimed:
            # The window alone: the record waits for its opening, notice kept.
            opens = window_opens(self.facts(cand), blocking, self.now)
            due = opens or due
        return build(
            Listed,
            does=Does.TRACK,
            sandbox=_sandbox(rec),
            record=rec,
            kind=kind,
            holds=tuple(holds),
            blocking=tuple(blocking),
            reasons=reasons,
            sync=sync,
            stage=stage,
            due_at=due,
            claimed=is_claimed,
            reason="",
            candidate=cand,
            window_opens=opens,
        )

    def create(self, cand: Candidate, kind: str) -> Listed:
        """A candidate without a record: the one the listing creates (a first
        sync makes thousands: its Listed built in one update, sandboxes/rules/frozen.py)."""
        facts = self.facts(cand)
        holds = compute_holds(facts, kind, now=self.now)
        blocking = blocking_holds(holds, kind)
        reasons = explain(holds, facts, stop_refusal=self.refusals.get(cand.lease_id, ""))
        stage, due = new_record_state(
            blocking=blocking,
            mode=cand.retirement_mode if self.mode is None else self.mode,
            now=self.now,
        )
        opens = window_opens(facts, blocking, self.now)
        return build(
            Listed,
            does=Does.CREATE,
            sandbox=(cand.provider, cand.provider_lease_id),
            record=None,
            kind=kind,
            holds=tuple(holds),
            blocking=tuple(blocking),
            reasons=reasons,
            sync=None,
            stage=stage,
            due_at=opens or due,
            claimed=False,
            reason="",
            candidate=cand,
            window_opens=opens,
        )

    def close(self, rec: Mapping[str, Any], reason: str) -> Listed:
        """A record whose lease is no longer a candidate closes, unless a worker
        holds it (left to it) or the console started its sandbox (woken: its
        worker stops it first)."""
        kind, stage = rec["kind"], rec["stage"]
        if claimed(rec, self.now):
            return Listed(Does.LEAVE, _sandbox(rec), rec, kind, stage=stage, claimed=True)
        if rec["started_for_salvage"]:
            due = self.now if stage not in (*STAGES_CLOSED, Stage.HELD) else rec["next_attempt_at"]
            return Listed(Does.WAKE, _sandbox(rec), rec, kind, stage=stage, due_at=due)
        return Listed(Does.DISMISS, _sandbox(rec), rec, kind, stage=stage, reason=reason)

    def give_way(self, rec: Mapping[str, Any]) -> Listed:
        """A newer lease row on the record's sandbox is itself a candidate: the
        record is dismissed, and the newest row listed on the next pass; one a
        worker holds, or whose sandbox the console started, waits for its worker."""
        if claimed(rec, self.now) or rec["started_for_salvage"]:
            is_claimed = claimed(rec, self.now)
            return Listed(
                Does.LEAVE, _sandbox(rec), rec, rec["kind"], stage=rec["stage"], claimed=is_claimed
            )
        return Listed(
            Does.DISMISS, _sandbox(rec), rec, rec["kind"], stage=rec["stage"], reason=NEWER_ROW
        )


def decide_listing(
    records: Iterable[Mapping[str, Any]],
    candidates: Iterable[Candidate],
    judged: Mapping[Any, Candidate],
    now: datetime,
    *,
    refusals: Mapping | None = None,
    mode: str | None = None,
    warm_retention: timedelta | None = None,
    window: Window | None | Each = Each.ENVIRONMENT,
) -> list[Listed]:
    """What the listing does to each open record (one answer each) and to each
    candidate without one, in the order of the candidates, then the re-judged.

    `judged`: the re-judged leases (`to_rejudge`) by id, missing where the
    lease's graph has placeholders again. `refusals`: why Paperclip's predicate
    refuses the stop of a lease held no_stop_receipt (the line says so).
    `mode`, `warm_retention`, `window` (None: any time): decide under that
    policy instead of each environment's (the preview)."""
    judge = _Judge(now, refusals or {}, mode, warm_retention, window)
    records = list(records)
    by_sandbox = {_sandbox(r): r for r in records}
    cands = {(c.provider, c.provider_lease_id): c for c in candidates}
    out: list[Listed] = []
    for key, cand in cands.items():
        if cand.kind is None:
            continue  # never: the candidate query lists rows that match a kind
        rec = by_sandbox.get(key)
        if rec is None:
            out.append(judge.create(cand, cand.kind))
        elif rec["lease_id"] == cand.lease_id:
            out.append(judge.track(rec, cand, cand.kind))
        else:
            out.append(judge.give_way(rec))
    for key, rec in by_sandbox.items():
        if key in cands:
            continue
        row = judged.get(rec["lease_id"])
        if row is None:
            out.append(Listed(Does.LEAVE, key, rec, rec["kind"], stage=rec["stage"]))
            continue  # its graph has placeholders again: leave it as it is
        moved = not row.names(*key)
        if row.kind is None or moved:
            # A moved lease's facts describe the sandbox it names now, never this
            # record's: the record closes, and that sandbox is listed on its own.
            out.append(judge.close(rec, LEASE_MOVED if moved else NOT_A_CANDIDATE))
            continue
        out.append(judge.track(rec, row, row.kind))
    return out


def changes_at(
    now: datetime,
    candidates: Iterable[Candidate],
    judged: Iterable[Candidate],
    records: Iterable[Mapping[str, Any]],
) -> datetime | None:
    """When a listing's answer changes with the clock alone: the first warm
    retention to end among the rows it judged, or the first claim to expire
    among the records it left to their worker (docs/rules.md, holds)."""
    times = [holds_change_at(c.facts, c.kind, now=now) for c in candidates]
    times += [holds_change_at(c.facts, c.kind, now=now) for c in judged]
    times += [r["claimed_until"] for r in records if claimed(r, now)]
    return min((t for t in times if t is not None), default=None)
