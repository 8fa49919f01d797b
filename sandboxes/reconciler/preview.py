"""Policy preview: what the next pass would do to an environment's kept
sandboxes under a policy, beside what it would do under the current one.

Computed with the pass's own functions and nothing else: the candidate listing
(`list_candidates`, `judge_leases`), the holds (`compute_holds`,
`blocking_holds`), the proof (`proof_from_receipts`), the listing's decisions
(`sync_step`, `new_record_state`) and the planner's (`situation_of`,
`next_step` through `settle`, sandboxes/rules/next_step.py), in the
order a pass claims records, with its per-pass cap.
It only reads: a fixed number of queries at any fleet size, no write, no
provider call.

What it cannot know is what a compare will find: a record that starts salvage
is counted under `salvage` (in auto mode without a notice period it is
expected to be retired in the same pass, and counts against the cap as such).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from sandboxes.models import Environment, EnvironmentLease, Receipt, Retirement
from sandboxes.models.choices import (
    STAGES_CLOSED,
    ReceiptKind,
    RetirementKind,
    RetirementMode,
    Stage,
)
from sandboxes.proof import fingerprints_of, replaced_workspace
from sandboxes.rules.holds import blocking_holds, compute_holds
from sandboxes.rules.next_step import (
    Next,
    Sync,
    new_record_state,
    notice_on,
    settle,
    situation_of,
    sync_step,
)
from sandboxes.rules.proof import PROOF_KINDS, proof_from_receipts

from .candidates import Candidate, judge_leases, list_candidates

# Categories, in display order, with what each means for an admin.
CATEGORIES = {
    "salvage": "start salvage (compare, export what is unsaved)",
    "retire": "be retired (destroyed, with proof)",
    "notice": "get a notice (retired after the notice period)",
    "noticed": "stay in their notice period",
    "awaiting_approval": "wait for approval",
    "stop": "be stopped and retained (corrections, superseded warm sandboxes)",
    "held": "be held",
    "wait_cap": "wait for the next pass (per-pass cap reached)",
    "retry_later": "wait for a scheduled retry",
    "observe": "be listed only (observe mode)",
    "listed": "stay listed (not due)",
    "dismissed": "be dismissed (no longer a candidate)",
    "in_progress": "be left to the worker that holds them",
}
_FROM_STEP = {
    Next.SALVAGE: "salvage",
    Next.UNPROVED: "retry_later",  # resume_failed without its replacement proof
    Next.RETIRE: "retire",
    Next.GIVE_NOTICE: "notice",
    Next.WAIT_NOTICE: "noticed",
    Next.AWAIT_APPROVAL: "awaiting_approval",
    Next.STOP_ONLY: "stop",
    Next.HOLD: "held",
    Next.WAIT_CAP: "wait_cap",
    Next.OBSERVE: "observe",
}
_WAITING_STAGE: dict[str, str] = {
    Stage.HELD: "held",
    Stage.AWAITING_APPROVAL: "awaiting_approval",
    Stage.NOTICED: "noticed",
    Stage.FAILED: "retry_later",
    Stage.COMPARING: "retry_later",
    Stage.EXPORTING: "retry_later",
    Stage.RETIRING: "retry_later",
    Stage.LISTED: "listed",
}
LIST_LIMIT = 500  # rows listed per category (counts are always complete)

RECORD_FIELDS = (
    "id",
    "lease_id",
    "provider",
    "provider_lease_id",
    "kind",
    "stage",
    "operator_hold_reason",
    "started_for_salvage",
    "next_attempt_at",
    "claimed_until",
    "retire_after",
    "notice_proof",
)


@dataclass(frozen=True)
class Policy:
    retirement_mode: str
    warm_retention: timedelta
    max_retirements_per_pass: int
    notice_period: timedelta

    @classmethod
    def of(cls, env: Environment) -> Policy:
        return cls(
            env.retirement_mode,
            env.warm_retention,
            env.max_retirements_per_pass,
            env.notice_period or timedelta(0),
        )


@dataclass
class Outcome:
    counts: dict = field(default_factory=dict)
    held_by_code: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)  # category → [row], at most LIST_LIMIT each

    def summary(self) -> dict:
        """What the audit row records."""
        return {"counts": dict(self.counts), "held_by_code": dict(self.held_by_code)}

    def ids(self, category: str) -> set:
        return {r["record_id"] for r in self.rows.get(category, []) if r["record_id"]}


@dataclass(frozen=True)
class _Item:
    """One sandbox as the next pass would meet it, after its listing."""

    record: dict | None  # None: the listing would create its record now
    kind: str
    sandbox: tuple
    holds: tuple
    blocking: tuple
    stage: str
    due_at: datetime | None
    claimed: bool
    dismissed: bool = False


# What _load reads: records (values() rows, each with its "record"), candidates,
# re-judged leases, receipts by record and fingerprints by record.
Loaded = tuple[list[dict[str, Any]], list[Candidate], dict, dict, dict]


def _as_record(rec: dict[str, Any]) -> Retirement:
    """The values() row as an unsaved Retirement, what proof_from_receipts,
    fingerprints_of and situation_of read (no query)."""
    r = Retirement(**{name: rec[name] for name in RECORD_FIELDS})
    if rec.get("lease") is not None:
        r.lease = rec["lease"]  # loaded for resume_failed only (its proof reads it)
    return r


def _load(env: Environment) -> Loaded:
    """The reads (a fixed number of queries): open records, candidates, the
    re-judged leases of records without a current candidate, and receipts."""
    records = list(Retirement.objects.filter(environment=env).open().values(*RECORD_FIELDS))
    # resume_failed is proved by its replacement: a re-read of its lease's
    # workspace (sandboxes.proof.replacement_proof), loaded here in one query.
    replaced = [r["lease_id"] for r in records if r["kind"] == RetirementKind.RESUME_FAILED]
    if replaced:
        leases = EnvironmentLease.objects.select_related("execution_workspace").in_bulk(replaced)
        for r in records:
            if r["kind"] == RetirementKind.RESUME_FAILED:
                r["lease"] = leases.get(r["lease_id"])
    for r in records:
        r["record"] = _as_record(r)
    candidates = list_candidates(env.pk)
    by_sandbox = {(c.provider, c.provider_lease_id): c for c in candidates}
    rejudge = [
        r["lease_id"]
        for r in records
        if (c := by_sandbox.get((r["provider"], r["provider_lease_id"]))) is None
        or c.lease_id != r["lease_id"]
    ]
    judged = judge_leases(rejudge)
    receipts: dict = {}
    if records:
        for x in Receipt.objects.filter(
            Q(kind__in=(*PROOF_KINDS, ReceiptKind.APPROVAL)),
            retirement__environment=env,
            retirement__stage__in=[s for s in Stage.values if s not in STAGES_CLOSED],
        ).order_by("confirmed_at", "created_at"):
            receipts.setdefault(x.retirement_id, []).append(x)
    # Only a record with proof receipts can have proof: bind those to what their
    # sandbox is now (the others have no proof whatever the fingerprint).
    fingerprints = fingerprints_of(r["record"] for r in records if r["id"] in receipts)
    return records, candidates, judged, receipts, fingerprints


def _kind(cand: Candidate) -> str:
    """A listed candidate, or a re-judged lease still a candidate, has its kind."""
    assert cand.kind is not None
    return cand.kind


@dataclass
class _Replay:
    """The listing (sync_retirements) replayed on the loaded rows under `policy`.
    `cache` keeps holds computed for one retention, for the other policy's replay."""

    policy: Policy
    now: datetime
    cache: dict

    def holds_of(self, cand: Candidate, operator_hold_reason: str = "") -> tuple[tuple, tuple]:
        key = (cand.lease_id, self.policy.warm_retention, operator_hold_reason)
        if key not in self.cache:
            facts = cand.facts
            if facts.warm_retention != self.policy.warm_retention:
                facts = replace(facts, warm_retention=self.policy.warm_retention)
            holds = compute_holds(
                facts, cand.kind, operator_hold_reason=operator_hold_reason, now=self.now
            )
            self.cache[key] = (tuple(holds), tuple(blocking_holds(holds, cand.kind)))
        return self.cache[key]

    def tracked(self, rec: dict, cand: Candidate) -> _Item:
        """An open record of the candidate's lease, after the listing's sync_step."""
        now = self.now
        holds, blocking = self.holds_of(cand, rec["operator_hold_reason"])
        claimed = rec["claimed_until"] is not None and rec["claimed_until"] > now
        step = sync_step(
            stage=rec["stage"],
            blocking=blocking,
            mode=self.policy.retirement_mode,
            started=rec["started_for_salvage"],
            next_attempt_at=rec["next_attempt_at"],
            claimed=claimed,
        )
        stage, due = rec["stage"], rec["next_attempt_at"]
        if step == Sync.HOLD:
            stage, due = Stage.HELD, None
        elif step == Sync.RELEASE:
            stage, due = Stage.LISTED, now
        elif step == Sync.WAKE and stage not in (*STAGES_CLOSED, Stage.HELD):
            due = now
        key = (cand.provider, cand.provider_lease_id)
        return _Item(rec, _kind(cand), key, holds, blocking, stage, due, claimed)

    def created(self, key: tuple, cand: Candidate) -> _Item:
        """A candidate without a record: the listing creates it (new_record_state)."""
        holds, blocking = self.holds_of(cand)
        stage, due = new_record_state(
            blocking=blocking, mode=self.policy.retirement_mode, now=self.now
        )
        return _Item(None, _kind(cand), key, holds, blocking, stage, due, False)


def _dismissed(rec: dict, key: tuple, now) -> _Item | None:
    """A record whose lease is no longer the candidate is dismissed, unless a
    worker holds it or the console started its sandbox."""
    claimed = rec["claimed_until"] is not None and rec["claimed_until"] > now
    if claimed or rec["started_for_salvage"]:
        return None
    return _Item(rec, rec["kind"], key, (), (), rec["stage"], None, False, True)


def _items(policy: Policy, records, candidates, judged, now, cache: dict) -> list[_Item]:
    """Replay the listing (sync_retirements) on the loaded rows under `policy`."""
    by_sandbox = {(r["provider"], r["provider_lease_id"]): r for r in records}
    cands = {(c.provider, c.provider_lease_id): c for c in candidates}
    replay = _Replay(policy, now, cache)
    items: list[_Item | None] = []
    for key, cand in cands.items():
        rec = by_sandbox.get(key)
        if rec is None:
            items.append(replay.created(key, cand))
        elif rec["lease_id"] == cand.lease_id:
            items.append(replay.tracked(rec, cand))
        else:
            # The old record gives way; the newest row is listed on the next pass.
            items.append(_dismissed(rec, key, now))
    for key, rec in by_sandbox.items():
        judged_row = None if key in cands else judged.get(rec["lease_id"])
        if judged_row is None:
            continue
        if judged_row.kind is None or not judged_row.names(*key):
            items.append(_dismissed(rec, key, now))
        else:
            items.append(replay.tracked(rec, judged_row))
    return [item for item in items if item is not None]


def _due(item: _Item, now) -> bool:
    """Retirement.objects.due (what claims.claim_next picks), on the item's post-listing state."""
    if item.claimed:
        return False
    if item.stage == Stage.HELD:
        return bool(item.record and item.record["started_for_salvage"])
    return item.due_at is not None and item.due_at <= now


def _next_step(item: _Item, policy: Policy, receipts: dict, fingerprints: dict, retired: int, now):
    """What the pass's worker would do with a due item: the planner's decision
    (situation_of, as plan_step builds it), settled within the pass."""
    rec = item.record
    r = rec["record"] if rec else Retirement()
    mine = receipts.get(r.pk, []) if rec else []
    # Bound to what the sandbox is now, as plan_step binds it.
    proof = (
        proof_from_receipts(r, mine, fingerprints.get(r.pk), workspace=replaced_workspace(r))
        if rec
        else None
    )
    situation = situation_of(
        r,
        kind=item.kind,
        blocking=item.blocking,
        mode=policy.retirement_mode,
        notice=policy.notice_period,
        proof=proof,
        receipts=mine,
        under_cap=retired < policy.max_retirements_per_pass,
    )
    return settle(situation, now)


def _row(item: _Item, category: str) -> dict:
    """One sandbox as the preview lists it under its category."""
    rec = item.record
    started = bool(rec and rec["started_for_salvage"])
    return {
        "record_id": str(rec["id"]) if rec else None,
        "provider": item.sandbox[0],
        "sandbox_id": item.sandbox[1],
        "kind": item.kind,
        "holds": list(item.blocking if category == "held" else item.holds),
        "stops_first": started and category not in ("salvage", "retire"),
    }


def outcome(
    policy: Policy,
    records: list[dict[str, Any]],
    candidates: list[Candidate],
    judged: dict,
    receipts: dict,
    fingerprints: dict,
    now: datetime,
    cache: dict | None = None,
) -> Outcome:
    items = _items(policy, records, candidates, judged, now, {} if cache is None else cache)
    # The order a pass claims records: next_attempt_at (nulls first), then id.
    items.sort(
        key=lambda i: (
            i.due_at is not None,
            i.due_at or now,
            str(i.record["id"]) if i.record else "~",
        )
    )
    retired = 0  # what Worker.retired_by_env counts
    out = Outcome()
    counts: Counter[str] = Counter()
    by_code: Counter[str] = Counter()
    rows: dict[str, list[dict]] = {}
    for item in items:
        if item.dismissed:
            category = "dismissed"
        elif item.claimed:
            category = "in_progress"
        elif not _due(item, now):
            category = _WAITING_STAGE.get(item.stage, "listed")
            if policy.retirement_mode == RetirementMode.OBSERVE and category == "listed":
                category = "observe"
        else:
            step = _next_step(item, policy, receipts, fingerprints, retired, now)
            category = _FROM_STEP[step]
            if step == Next.RETIRE or (
                step == Next.SALVAGE
                and policy.retirement_mode == RetirementMode.AUTO
                and not notice_on(policy.retirement_mode, policy.notice_period)
            ):
                retired += 1  # a salvage is expected to end in a retirement this pass
        counts[category] += 1
        if category == "held":
            by_code.update(item.blocking or item.holds)
        bucket = rows.setdefault(category, [])
        if len(bucket) < LIST_LIMIT:
            bucket.append(_row(item, category))
    out.counts = {c: counts[c] for c in CATEGORIES if counts[c]}
    out.held_by_code = dict(sorted(by_code.items()))
    out.rows = rows
    return out


@dataclass
class Preview:
    current: Outcome
    proposed: Outcome
    seconds: float = 0.0

    @property
    def changed(self) -> list[str]:
        cats = list(CATEGORIES)
        return [c for c in cats if self.current.counts.get(c, 0) != self.proposed.counts.get(c, 0)]


def preview(env: Environment, proposed: Policy, now: datetime | None = None) -> Preview:
    """The next pass under the current policy and under `proposed` (reads only)."""
    import time

    t0 = time.monotonic()
    now = now or timezone.now()
    loaded = _load(env)
    cache: dict = {}
    current = outcome(Policy.of(env), *loaded, now, cache)
    new = outcome(proposed, *loaded, now, cache)
    return Preview(current, new, time.monotonic() - t0)
