"""Operator holds that end on their own: the first pass after a hold's end
releases it, audited ("hold by alice ended"), and makes the record due, so the
listing that follows judges it again (docs/rules.md, holds)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from sandboxes import audit
from sandboxes.models import Retirement
from sandboxes.models.choices import HoldCode

# Bounded per pass; the rest end on the next one.
PER_PASS = 500


def _state(r: Retirement) -> dict:
    return {
        "stage": r.stage,
        "holds": list(r.holds or []),
        "operator_hold_reason": r.operator_hold_reason,
        "operator_hold_until": r.operator_hold_until.isoformat() if r.operator_hold_until else None,
    }


def end_operator_holds(environment_id, *, now: datetime) -> int:
    """Release every open record's operator hold whose end has come; returns how many."""
    ended = Retirement.objects.open().filter(operator_hold_until__lte=now)
    if environment_id is not None:
        ended = ended.filter(environment_id=environment_id)
    count = 0
    for pk in list(ended.order_by("operator_hold_until").values_list("pk", flat=True)[:PER_PASS]):
        with transaction.atomic():
            r = (
                Retirement.objects.select_for_update(of=("self",))
                .filter(pk=pk, operator_hold_until__lte=now)
                .first()
            )
            if r is None or not r.is_open:
                continue  # released or re-held by a person meanwhile
            before = _state(r)
            who = r.operator_hold_by or "an operator"
            r.clear_operator_hold()
            r.next_attempt_at = now
            r.save(
                update_fields=[
                    "operator_hold_reason",
                    "operator_hold_by",
                    "operator_hold_at",
                    "operator_hold_until",
                    "holds",
                    "hold_reasons",
                    "next_attempt_at",
                    "updated_at",
                ]
            )
            audit.record(
                actor=None,
                action="retirement.hold_ended",
                obj=r,
                reason=f"hold by {who} ended",
                before=before,
                after={**_state(r), "released": HoldCode.OPERATOR_HOLD},
            )
            count += 1
    return count
