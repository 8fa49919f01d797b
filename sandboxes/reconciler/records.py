"""How the machine leaves a record it holds under the row lock: waiting in a
stage, closed with a reason (audited), or with its failures cleared.

Call these inside `claims.fenced` (the planner and the steps do)."""

from __future__ import annotations

from sandboxes import audit
from sandboxes.models import Retirement
from sandboxes.models.choices import Stage


def iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def close_record(r: Retirement, stage: str, reason: str, now) -> None:
    before = {"stage": r.stage}
    r.stage = stage
    r.closed_at = now
    r.closed_reason = reason
    r.next_attempt_at = None
    r.save()
    audit.record(
        actor=None,
        action=f"retirement.{stage}",
        obj=r,
        reason=reason,
        before=before,
        after={"stage": stage, "kind": r.kind},
    )


def wait_record(r: Retirement, stage: str, next_attempt_at=None, *, keep_notice=False) -> None:
    """`keep_notice`: held by the retirement window alone, the notice stands
    (docs/rules.md, the retirement window)."""
    r.stage = stage
    r.next_attempt_at = next_attempt_at
    if stage == Stage.HELD and not keep_notice:
        # A hold stops a running notice: once it clears, the owner hears again.
        r.retire_after = None
        r.notice_proof = ""
    r.save()


def clear_failures(r: Retirement) -> None:
    """A step succeeded: the record's failure count and flags start again."""
    r.attempts = 0
    r.needs_attention = False
    r.last_error = ""
    r.failing_since = None
