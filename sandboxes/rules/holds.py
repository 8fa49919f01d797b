"""Which holds apply to a candidate, and their words: pure functions over plain
data (docs/rules.md, holds).

One table, `HOLDS`, gives each code its line (the explanation the reconciler
stores on the record and the record's page and the API show) and its phrase
(how the sandbox list says it), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .codes import (
    ISSUE_CLOSED,
    RUN_LIVE,
    HoldCode,
    LeaseStatus,
    RetirementKind,
    SaveState,
)
from .window import Window


@dataclass(frozen=True)
class Hold:
    """One hold's words: `explanation`, the line in the words of docs/rules.md
    (holds); `phrase`, the sandbox list's, where `{task}` is the task's key and
    `{reason}` the operator's own words."""

    explanation: str
    phrase: str


# Hold evaluation order is the display order.
HOLDS: dict[str, Hold] = {
    HoldCode.RUN_ACTIVE: Hold(
        "The lease's own run is still live (queued, retrying or running).",
        "waiting for its run",
    ),
    HoldCode.ISSUE_RUN_ACTIVE: Hold(
        "Another run on this task is live; it may still need the sandbox.",
        "another run on {task} is live",
    ),
    HoldCode.RECOVERY_OPEN: Hold(
        "A recovery action on this task (or the console's file recovery of "
        "this lease) is still open.",
        "a recovery on {task} is open",
    ),
    HoldCode.EXPORT_PENDING: Hold(
        "A native export of run files from this sandbox is still in flight.",
        "an export of run files is in flight",
    ),
    HoldCode.INTENT_PENDING: Hold(
        "A stop, export or restore request on this lease is still pending.",
        "a stop, export or restore request is pending",
    ),
    HoldCode.SANDBOX_SHARED: Hold(
        "Another lease on the same sandbox is active, retained or pending.",
        "another live lease uses this sandbox",
    ),
    HoldCode.NEWER_LEASE: Hold(
        "A newer lease row names the same sandbox; that row decides its fate.",
        "a newer lease row decides",
    ),
    HoldCode.NO_STOP_RECEIPT: Hold(
        "No confirmed stop receipt for this lease, run and sandbox yet.",
        "waiting for a confirmed stop",
    ),
    HoldCode.TASK_CAN_RESUME: Hold(
        "The task can still resume this sandbox: it is bound to this "
        "workspace, or another row of the sandbox can resume.",
        "{task} can still resume it",
    ),
    HoldCode.WRITER_ACTIVE: Hold(
        "The workspace's writer hold is not settled; files may be unsaved.",
        "the workspace writer has not settled",
    ),
    HoldCode.RETENTION: Hold(
        "Still inside the environment's warm retention window.",
        "inside the retention window",
    ),
    HoldCode.UNKNOWN_AGE: Hold(
        "A timestamp the rule needs is missing; what cannot be dated stays.",
        "cannot be dated (a timestamp is missing)",
    ),
    HoldCode.OPERATOR_HOLD: Hold(
        "An operator put this sandbox on hold.",
        "held by an operator: {reason}",
    ),
    HoldCode.PROVIDER_UNSUPPORTED: Hold(
        "The console has no client for this lease's provider; it is listed, never touched.",
        "no client for this provider",
    ),
    # Hold-like: nothing is wrong with the sandbox, the hour is (docs/rules.md,
    # the retirement window); it waits for the window to open.
    HoldCode.OUTSIDE_WINDOW: Hold(
        "Outside the environment's retirement window: destroys and owner notices wait for it.",
        "outside the retirement window",
    ),
}
HOLD_ORDER = [str(code) for code in HOLDS]
HOLD_EXPLANATIONS: dict[str, str] = {code: hold.explanation for code, hold in HOLDS.items()}

# Kinds whose only provider call is a stop.
STOP_ONLY_KINDS = (
    RetirementKind.SUPERSEDED_RUNNING_WARM,
    RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN,
)
# Every hold blocks every provider mutation, stops included ("every existing
# hold still applies", seed 001; "preserve the existing ownership hold", seed
# 002), except these, which a stop does not need to wait for (docs/rules.md, holds): the
# stop settles a missing stop receipt, a stopped sandbox still resumes, a stop
# keeps the disk, and retention, unknown age and the retirement window gate
# only a destroy (and its notice).
STOP_IGNORES = frozenset(
    {
        HoldCode.NO_STOP_RECEIPT,
        HoldCode.TASK_CAN_RESUME,
        HoldCode.WRITER_ACTIVE,
        HoldCode.RETENTION,
        HoldCode.UNKNOWN_AGE,
        HoldCode.OUTSIDE_WINDOW,
    }
)
# Kinds that claim the sandbox is already suspended: they need the stop receipt.
NEEDS_STOP_RECEIPT = (
    RetirementKind.ABANDONED_WARM,
    RetirementKind.DONE_TASK_WARM,
    RetirementKind.CLOSED_RESTORE_SOURCE,
)
# Providers the console has a client for (docs/architecture.md, the rooms);
# others are listed and held.
DRIVEN_PROVIDERS = ("daytona", "local")


@dataclass(frozen=True)
class LeaseFacts:
    """Everything hold evaluation needs about one lease row, already loaded."""

    lease_id: object
    status: str
    acquired_at: datetime | None
    released_at: datetime | None
    warm_retention: timedelta | None
    issue_status: str | None
    bound_here: bool
    run_status: str | None
    writer_run_id: object | None
    save_state: str | None
    issue_run_live: bool
    recovery_open: bool
    export_pending: bool
    intent_pending: bool
    sandbox_shared: bool
    newer_lease: bool
    has_stop_receipt: bool
    # Another row naming the sandbox that its task can still resume (docs/rules.md, holds:
    # task_can_resume is checked against every row, clocks skew).
    resumable_elsewhere: bool = False
    # Some row naming the sandbox has no acquired_at: the rows cannot be ordered.
    undated_row: bool = False
    provider: str = ""
    # The open recovery action that holds the task, in words ("restore recovery
    # on PAP-142"); "" when none or not known.
    recovery_action: str = ""
    # The environment's retirement window (None: any time).
    window: Window | None = None


def window_closed(facts: LeaseFacts, kind: str | None, now: datetime) -> bool:
    """Whether the retirement window keeps this candidate waiting now. A stop is
    not a destroy: the stop-only kinds are never limited (docs/rules.md, the
    retirement window)."""
    return (
        facts.window is not None
        and kind is not None
        and kind not in STOP_ONLY_KINDS
        and not facts.window.is_open(now)
    )


def window_opens(facts: LeaseFacts, holds, now: datetime) -> datetime | None:
    """When a record held by the window alone may go on: the window's next
    opening; None if it waits for anything else too (those holds follow data,
    not the clock) or the window is open."""
    if facts.window is None or list(holds) != [HoldCode.OUTSIDE_WINDOW]:
        return None
    return facts.window.next_opening(now)


def compute_holds(
    facts: LeaseFacts, kind: str | None, *, operator_hold_reason: str = "", now: datetime
) -> list[str]:
    """Every reason this candidate must wait, in HOLD_ORDER."""
    codes: set[str] = set()
    if facts.run_status in RUN_LIVE:
        codes.add(HoldCode.RUN_ACTIVE)
    if facts.issue_run_live:
        codes.add(HoldCode.ISSUE_RUN_ACTIVE)
    if facts.recovery_open:
        codes.add(HoldCode.RECOVERY_OPEN)
    if facts.export_pending:
        codes.add(HoldCode.EXPORT_PENDING)
    if facts.intent_pending:
        codes.add(HoldCode.INTENT_PENDING)
    if facts.sandbox_shared:
        codes.add(HoldCode.SANDBOX_SHARED)
    if facts.newer_lease:
        codes.add(HoldCode.NEWER_LEASE)
    if kind in NEEDS_STOP_RECEIPT and not facts.has_stop_receipt:
        codes.add(HoldCode.NO_STOP_RECEIPT)
    if facts.resumable_elsewhere or (
        facts.status in (LeaseStatus.RELEASED, LeaseStatus.RETAINED)
        and facts.bound_here
        and facts.issue_status not in ISSUE_CLOSED
    ):
        codes.add(HoldCode.TASK_CAN_RESUME)
    if facts.writer_run_id is not None or facts.save_state == SaveState.SAVING:
        codes.add(HoldCode.WRITER_ACTIVE)
    if facts.acquired_at is None or facts.undated_row:
        codes.add(HoldCode.UNKNOWN_AGE)
    if kind == RetirementKind.DONE_TASK_WARM:
        if facts.released_at is None or facts.warm_retention is None:
            codes.add(HoldCode.UNKNOWN_AGE)
        elif facts.released_at + facts.warm_retention > now:
            codes.add(HoldCode.RETENTION)
    if operator_hold_reason.strip():
        codes.add(HoldCode.OPERATOR_HOLD)
    if facts.provider and facts.provider not in DRIVEN_PROVIDERS:
        codes.add(HoldCode.PROVIDER_UNSUPPORTED)
    if window_closed(facts, kind, now):
        codes.add(HoldCode.OUTSIDE_WINDOW)
    return [code for code in HOLD_ORDER if code in codes]


def holds_change_at(facts: LeaseFacts, kind: str | None, *, now: datetime) -> datetime | None:
    """When compute_holds' answer for these facts changes with time alone: the end
    of the warm retention a `done_task_warm` candidate is still inside, or the
    retirement window's next opening or closing (None if no time-based hold
    applies). Every other hold follows data, not the clock."""
    times = []
    if (
        kind == RetirementKind.DONE_TASK_WARM
        and facts.released_at is not None
        and facts.warm_retention is not None
    ):
        ends = facts.released_at + facts.warm_retention
        if ends > now:
            times.append(ends)
    if facts.window is not None and kind is not None and kind not in STOP_ONLY_KINDS:
        times.append(facts.window.next_change(now))
    return min(times, default=None)


def blocking_holds(holds: list[str], kind: str | None) -> list[str]:
    """The holds that stop the next step: all of them; a stop-only step ignores
    only the holds a stop does not need to wait for (STOP_IGNORES)."""
    if kind in STOP_ONLY_KINDS:
        return [h for h in holds if h not in STOP_IGNORES]
    return list(holds)


def explain(
    holds: list[str],
    facts: LeaseFacts | None = None,
    before: dict | None = None,
    stop_refusal: str = "",
) -> dict[str, str]:
    """Each hold's line; where the facts name what holds (the open recovery
    action), the line names it, and a stop Paperclip's predicate refuses says
    which condition failed (`stop_refusal`). An operator's own words (`before`,
    the record's stored lines) are kept."""
    reasons = {code: HOLD_EXPLANATIONS[code] for code in holds}
    if stop_refusal and HoldCode.NO_STOP_RECEIPT in reasons:
        reasons[HoldCode.NO_STOP_RECEIPT] = f"Stop not confirmed: {stop_refusal}."
    if facts is not None and facts.recovery_action and HoldCode.RECOVERY_OPEN in reasons:
        reasons[HoldCode.RECOVERY_OPEN] = f"{facts.recovery_action} is open."
    if facts is not None and facts.window is not None and HoldCode.OUTSIDE_WINDOW in reasons:
        reasons[HoldCode.OUTSIDE_WINDOW] = (
            f"Outside the environment's retirement window ({facts.window.describe()}): "
            "destroys and owner notices wait for it."
        )
    operator = (before or {}).get(HoldCode.OPERATOR_HOLD)
    if operator and HoldCode.OPERATOR_HOLD in reasons:
        reasons[HoldCode.OPERATOR_HOLD] = operator
    return reasons


def explanation(code: str, reasons: dict | None = None) -> str:
    """What a record's hold means: the reason stored with it (an operator's own
    words for operator_hold), else the rule's line; "" for an unknown code."""
    return (reasons or {}).get(code) or HOLD_EXPLANATIONS.get(code, "")


def phrase(
    code: str,
    *,
    reason: str = "",
    task: str = "the task",
    run: str = "",
    run_status: str = "",
    retention_until: str = "",
    operator_reason: str = "",
    operator: str = "",
    operator_since: str = "",
    operator_until: str = "",
    window_opens: str = "",
) -> str:
    """One hold as every page, the API and the notifications say it, with its end
    when it has one, from plain values already loaded: the record's stored line
    (`reason`), the task's key, the lease's run (short id, status in words), when
    the retention ends (in words), and the operator's hold: who, why, since and
    until when (in words), and when the retirement window opens (its own time
    zone's "Mon 09:00")."""
    if code == HoldCode.OUTSIDE_WINDOW and window_opens:
        return f"outside the retirement window (opens {window_opens})"
    if code == HoldCode.RETENTION and retention_until:
        return f"retention until {retention_until}"
    if code == HoldCode.RUN_ACTIVE and run:
        return f"waiting for run {run} ({run_status})"
    if code == HoldCode.OPERATOR_HOLD and operator:
        when = [f"since {operator_since}"] if operator_since else []
        when.append(f"until {operator_until}" if operator_until else "until released")
        return f"held by {operator}: {operator_reason or 'no reason'} ({', '.join(when)})"
    specific = _specific(code, reason)
    if specific:
        return specific
    hold = HOLDS.get(code)
    if hold is None:
        return str(code).replace("_", " ")
    return hold.phrase.format(task=task, reason=operator_reason or "no reason")


def _specific(code: str, reason: str) -> str:
    """The record's own line where it names more than the rule does (the
    recovery action that is open, the condition Paperclip's predicate refused a
    stop on), as a phrase: "stop not confirmed: the lease …"; else ""."""
    if code not in (HoldCode.RECOVERY_OPEN, HoldCode.NO_STOP_RECEIPT):
        return ""
    if not reason or reason == HOLD_EXPLANATIONS[code]:
        return ""
    return reason[:1].lower() + reason[1:].rstrip(".")
