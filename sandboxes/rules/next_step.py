"""What happens next to a record: pure functions over plain data (docs/rules.md,
what happens next).

The planner (`situation_of`, then `next_step`) and the policy preview ask these,
and so does the listing's decision (`sync_step`, `new_record_state`, through
sandboxes/rules/listing.py): the preview computes what a pass would do with the
very rules a pass follows, never a copy of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from .codes import RetirementKind, RetirementMode, Stage
from .holds import STOP_ONLY_KINDS
from .proof import Proof, ReceiptData, Record, has_approval, proof_key


class Next(StrEnum):
    """next_step's answers; the planner turns each into a wait or a plan
    (sandboxes/reconciler/plan.py, `_follow`)."""

    STOP_BEFORE_WAIT = "stop_before_wait"  # stop the sandbox the console started, then decide again
    HOLD = "hold"  # a hold blocks the next step: the record waits as `held`
    OBSERVE = "observe"  # observe mode: listed and explained, nothing more
    STOP_ONLY = "stop_only"  # a correction / superseded warm sandbox: stop and retain
    AWAIT_APPROVAL = "await_approval"  # manual mode: proof ready, waits for an operator
    GIVE_NOTICE = "give_notice"  # auto mode with a notice period: announce, retire after it
    WAIT_NOTICE = "wait_notice"  # the notice period is running
    WAIT_CAP = "wait_cap"  # the per-pass cap is reached: the next pass goes on
    RETIRE = "retire"  # destroy (through authorize_destroy)
    SALVAGE = "salvage"  # compare (and export) to earn the proof
    # resume_failed is proved by its replacement only, never by a compare: without
    # that proof the gate refuses, and the record fails, retries, then needs attention.
    UNPROVED = "unproved"


@dataclass(frozen=True)
class Situation:
    """Everything the next step depends on, already loaded under the row lock."""

    kind: str
    blocking: tuple  # hold codes that block the next step
    mode: str
    started: bool  # the console started the sandbox for salvage
    proof: bool
    approved: bool
    notice: timedelta | None  # the environment's notice period (None or 0: off)
    notice_valid: bool  # a notice was given for exactly this proof
    retire_after: datetime | None
    under_cap: bool


class OpenRecord(Record, Protocol):
    """What situation_of reads of a record, beyond what its proof reads."""

    @property
    def started_for_salvage(self) -> bool: ...
    @property
    def retire_after(self) -> datetime | None: ...
    @property
    def notice_proof(self) -> str: ...


def situation_of(
    r: OpenRecord,
    *,
    kind: str,
    blocking,
    mode: str,
    notice: timedelta | None,
    proof: Proof | None,
    receipts: Iterable[ReceiptData],
    under_cap: bool,
) -> Situation:
    """The Situation of record `r` (its started flag and notice), its proof as
    bound now and its loaded receipts (for the approval), under a policy (`mode`,
    `notice`). The planner and the policy preview both build it here."""
    return Situation(
        kind=kind,
        blocking=tuple(blocking),
        mode=mode,
        started=r.started_for_salvage,
        proof=bool(proof),
        approved=proof is not None and has_approval(r, proof, receipts),
        notice=notice,
        notice_valid=notice_valid(r.retire_after, r.notice_proof, proof_key(proof)),
        retire_after=r.retire_after,
        under_cap=under_cap,
    )


def notice_on(mode: str, notice: timedelta | None) -> bool:
    """A notice period applies in auto mode only (manual waits for a person anyway)."""
    return mode == RetirementMode.AUTO and notice is not None and notice > timedelta(0)


def next_step(s: Situation, now: datetime) -> Next:
    if s.blocking:
        return Next.STOP_BEFORE_WAIT if s.started else Next.HOLD
    if s.mode == RetirementMode.OBSERVE:
        return Next.STOP_BEFORE_WAIT if s.started else Next.OBSERVE
    if s.kind in STOP_ONLY_KINDS:
        return Next.STOP_ONLY
    if s.proof:
        if s.mode == RetirementMode.MANUAL and not s.approved:
            return Next.STOP_BEFORE_WAIT if s.started else Next.AWAIT_APPROVAL
        if notice_on(s.mode, s.notice):
            if not s.notice_valid:
                return Next.STOP_BEFORE_WAIT if s.started else Next.GIVE_NOTICE
            if s.retire_after is None or s.retire_after > now:
                return Next.STOP_BEFORE_WAIT if s.started else Next.WAIT_NOTICE
        if not s.under_cap:
            return Next.WAIT_CAP
        return Next.RETIRE
    if not s.under_cap:
        # The cap is reached: start nothing this pass that could not be retired.
        return Next.WAIT_CAP
    if s.kind == RetirementKind.RESUME_FAILED:
        return Next.UNPROVED
    return Next.SALVAGE


def settle(s: Situation, now: datetime) -> Next:
    """Where a worker's loop ends up within one pass: after a stop-before-wait it
    decides again on the stopped sandbox."""
    step = next_step(s, now)
    if step == Next.STOP_BEFORE_WAIT:
        return next_step(replace(s, started=False), now)
    return step


def notice_valid(retire_after, notice_proof: str, proof_key: str) -> bool:
    """A notice counts for the proof it announced, and only while it stands (a
    hold clears it: after the hold the owner hears again)."""
    return retire_after is not None and bool(proof_key) and notice_proof == proof_key


# --- the listing's decisions ---------------------------------------------------------


class Sync(StrEnum):
    """What the listing does to an open record whose holds it just recomputed."""

    HOLD = "hold"  # a hold appeared: the record waits as `held`
    RELEASE = "release"  # its holds cleared: `held` becomes `listed`, due now
    WAKE = "wake"  # due now (a started sandbox is stopped first by its worker)


def sync_step(
    *, stage: str, blocking, mode: str, started: bool, next_attempt_at, claimed: bool
) -> Sync | None:
    """What the listing does to an open record whose holds it just recomputed."""
    if claimed:
        return None  # its worker re-judges it under the row lock
    if blocking and stage != Stage.HELD:
        return Sync.WAKE if started else Sync.HOLD  # a started sandbox is stopped first
    if not blocking and stage == Stage.HELD:
        return Sync.RELEASE
    if (
        not blocking
        and mode != RetirementMode.OBSERVE
        and next_attempt_at is None
        and (
            stage == Stage.LISTED
            # Manual → auto: nothing will approve it, so it proceeds.
            or (stage == Stage.AWAITING_APPROVAL and mode == RetirementMode.AUTO)
        )
    ):
        return Sync.WAKE
    return None


def new_record_state(*, blocking, mode: str, now) -> tuple[str, datetime | None]:
    """Stage and due time of a record the listing creates."""
    stage = Stage.HELD if blocking else Stage.LISTED
    due = None if (blocking or mode == RetirementMode.OBSERVE) else now
    return stage, due
