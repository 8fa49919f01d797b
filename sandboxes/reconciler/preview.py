"""Policy preview: what the next pass would do to an environment's kept
sandboxes under a policy, beside what it would do under the current one.

Computed with the pass's own functions and nothing else: the candidate listing
(`list_candidates`, `judge_leases`), the listing's decision
(`sandboxes/rules/listing.py:decide_listing`, which `sync_retirements` writes
and this counts, under the policy), the proof (`proof_from_receipts`) and the
planner's decision (`situation_of`, `next_step` through `settle`,
sandboxes/rules/next_step.py), in the order a pass claims records, with its
per-pass cap. It only reads: a fixed number of queries at any fleet size, no
write, no provider call.

What it cannot know is what a compare will find: a record that starts salvage
is counted under `salvage` (in auto mode without a notice period it is
expected to be retired in the same pass, and counts against the cap as such).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from sandboxes.models import Environment, EnvironmentLease, Receipt, Retirement
from sandboxes.models.choices import (
    RetirementKind,
    RetirementMode,
    Stage,
)
from sandboxes.proof import fingerprints_of
from sandboxes.rules import listing
from sandboxes.rules.listing import Candidate, Does, Listed, decide_listing, to_rejudge
from sandboxes.rules.next_step import Next, notice_on, settle, situation_of
from sandboxes.rules.proof import proof_from_receipts
from sandboxes.rules.window import Window

from .candidates import judge_leases, list_candidates

# Categories, in display order, with what each means for an admin.
CATEGORIES = {
    "salvage": "start salvage (compare, export what is unsaved)",
    "retire": "be retired (destroyed, with proof)",
    "notice": "get a notice (retired after the notice period)",
    "noticed": "stay in their notice period",
    "awaiting_approval": "wait for approval",
    "stop": "be stopped and retained (corrections, superseded warm sandboxes)",
    "held": "be held",
    "window": "wait for the retirement window",
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

# The listing's fields, and what the planner reads of a notice.
RECORD_FIELDS = (*listing.RECORD_FIELDS, "retire_after", "notice_proof")


@dataclass(frozen=True)
class Policy:
    retirement_mode: str
    warm_retention: timedelta
    max_retirements_per_pass: int
    notice_period: timedelta
    window: Window | None = None  # the retirement window (None: any time)

    @classmethod
    def of(cls, env: Environment) -> Policy:
        return cls(
            env.retirement_mode,
            env.warm_retention,
            env.max_retirements_per_pass,
            env.notice_period or timedelta(0),
            env.window,
        )


@dataclass
class Outcome:
    counts: dict = field(default_factory=dict)
    held_by_code: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)  # category → [row], at most LIST_LIMIT each
    # When the records counted under "window" may go on, in the window's own
    # time zone ("Mon 09:00"); "" when none waits for it.
    window_opens: str = ""

    def summary(self) -> dict:
        """What the audit row records."""
        out = {"counts": dict(self.counts), "held_by_code": dict(self.held_by_code)}
        return out | ({"window_opens": self.window_opens} if self.window_opens else {})

    def ids(self, category: str) -> set:
        return {r["record_id"] for r in self.rows.get(category, []) if r["record_id"]}


# What _load reads: records (values() rows, each with its "record"), candidates,
# re-judged leases, receipts by record and fingerprints by record.
Loaded = tuple[list[dict[str, Any]], list[Candidate], dict, dict, dict]


def _as_record(rec: dict[str, Any]) -> Retirement:
    """The values() row as an unsaved Retirement, what fingerprints_of and
    situation_of read (no query)."""
    return Retirement(**{name: rec[name] for name in RECORD_FIELDS})


def _load(env: Environment) -> Loaded:
    """The reads (a fixed number of queries): open records, candidates, the
    re-judged leases of records without a current candidate, and receipts."""
    records = list(Retirement.objects.filter(environment=env).open().values(*RECORD_FIELDS))
    # resume_failed is proved by its replacement: a re-read of its lease's
    # workspace (sandboxes.rules.proof.replacement_proof), loaded here in one query.
    replaced = [r["lease_id"] for r in records if r["kind"] == RetirementKind.RESUME_FAILED]
    if replaced:
        leases = EnvironmentLease.objects.select_related("execution_workspace").in_bulk(replaced)
        for r in records:
            if r["kind"] == RetirementKind.RESUME_FAILED:
                lease = leases.get(r["lease_id"])
                r["workspace"] = lease.execution_workspace if lease is not None else None
    for r in records:
        r["record"] = _as_record(r)
    candidates = list_candidates(env.pk)
    judged = judge_leases(to_rejudge(records, candidates))
    receipts: dict = {}
    if records:
        for x in Receipt.objects.proof_of(Retirement.objects.filter(environment=env).open()):
            receipts.setdefault(x.retirement_id, []).append(x)
    # Only a record with proof receipts can have proof: bind those to what their
    # sandbox is now (the others have no proof whatever the fingerprint).
    fingerprints = fingerprints_of(r["record"] for r in records if r["id"] in receipts)
    return records, candidates, judged, receipts, fingerprints


def _next_step(item: Listed, policy: Policy, receipts: dict, fingerprints: dict, retired: int, now):
    """What the pass's worker would do with a due item: the planner's decision
    (situation_of, as plan_step builds it), settled within the pass."""
    rec = item.record
    r = rec["record"] if rec else Retirement()
    mine = receipts.get(r.pk, []) if rec else []
    # Bound to what the sandbox is now, as plan_step binds it.
    proof = (
        proof_from_receipts(r, mine, fingerprints.get(r.pk), workspace=rec.get("workspace"))
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


def _row(item: Listed, category: str) -> dict:
    """One sandbox as the preview lists it under its category."""
    rec = item.record
    started = bool(rec and rec["started_for_salvage"])
    return {
        "record_id": str(rec["id"]) if rec else None,
        "provider": item.sandbox[0],
        "sandbox_id": item.sandbox[1],
        "kind": item.kind,
        "holds": list(item.blocking if category in ("held", "window") else item.holds),
        "stops_first": started and category not in ("salvage", "retire"),
    }


def _listed(policy: Policy, records, candidates, judged, now: datetime) -> list[Listed]:
    """What the listing does to each sandbox under `policy`, in the order a pass
    then claims records: next_attempt_at (nulls first), then id. Not counted: a
    record the listing leaves as it is (another worker holds it, or its lease's
    graph has placeholders again), or wakes only for its worker to stop the
    sandbox it started before the record closes."""
    decided = decide_listing(
        records,
        candidates,
        judged,
        now,
        mode=policy.retirement_mode,
        warm_retention=policy.warm_retention,
        window=policy.window,
    )
    items = [d for d in decided if d.does not in (Does.LEAVE, Does.WAKE)]
    items.sort(
        key=lambda i: (
            i.due_at is not None,
            i.due_at or now,
            str(i.record["id"]) if i.record else "~",
        )
    )
    return items


def outcome(
    policy: Policy,
    records: list[dict[str, Any]],
    candidates: list[Candidate],
    judged: dict,
    receipts: dict,
    fingerprints: dict,
    now: datetime,
) -> Outcome:
    items = _listed(policy, records, candidates, judged, now)
    retired = 0  # what Worker.retired_by_env counts
    out = Outcome()
    counts: Counter[str] = Counter()
    by_code: Counter[str] = Counter()
    rows: dict[str, list[dict]] = {}
    for item in items:
        if item.does is Does.DISMISS:
            category = "dismissed"
        elif item.claimed:
            category = "in_progress"
        elif not item.due(now):
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
        if category == "held" and item.window_opens is not None:
            category = "window"  # held by the retirement window alone
        counts[category] += 1
        if category in ("held", "window"):
            by_code.update(item.blocking or item.holds)
        bucket = rows.setdefault(category, [])
        if len(bucket) < LIST_LIMIT:
            bucket.append(_row(item, category))
    out.counts = {c: counts[c] for c in CATEGORIES if counts[c]}
    out.held_by_code = dict(sorted(by_code.items()))
    out.rows = rows
    if counts["window"] and policy.window is not None:
        out.window_opens = policy.window.opens_words(now)
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
    current = outcome(Policy.of(env), *loaded, now)
    new = outcome(proposed, *loaded, now)
    return Preview(current, new, time.monotonic() - t0)
