"""Operator actions on many kept sandboxes at once: the kept-sandbox list's bulk
bar and the approvals queue. Each record is checked and audited on its own, in
its own transaction, by the same function as its button (sandboxes/actions.py),
so proof, holds and permissions are enforced exactly as one at a time."""

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from sandboxes.actions import (
    MAX_BULK_APPROVE,
    ActionRefused,
    _reason,
    _require,
    approve,
    hold,
    hold_end,
    release_hold,
    retry,
)

# At most this many records at a time, selected or "all matching these filters".
MAX_BULK = 200

# The actions a bulk request may take: the function and the permission it needs.
BULK_ACTIONS = {
    "hold": (hold, "hold_retirement"),
    "release_hold": (release_hold, "hold_retirement"),
    "retry": (retry, "retry_retirement"),
    "approve": (approve, "approve_retirement"),
}


def bulk(
    name: str, retirement_ids, *, actor, reason: str, until=None, limit: int = MAX_BULK
) -> tuple[list, dict]:
    """Take one action on each record; returns (done ids, {id: why refused}).
    A request that cannot apply to any record (no permission, no reason, a bad
    end, too many ids) is refused whole, naming the field."""
    if name not in BULK_ACTIONS:
        raise ActionRefused(f"action: unknown bulk action {name!r}.")
    call, codename = BULK_ACTIONS[name]
    _require(actor, codename)
    reason = _reason(reason)
    if name == "hold":
        hold_end(actor, until, timezone.now())
    ids = list(dict.fromkeys(str(i) for i in retirement_ids))
    if not ids:
        raise ActionRefused("ids: select at least one kept sandbox.")
    if len(ids) > limit:
        raise ActionRefused(f"ids: at most {limit} kept sandboxes at a time ({len(ids)} given).")
    extra = {"until": until} if name == "hold" else {}
    done, refused = [], {}
    for rid in ids:
        try:
            call(rid, actor=actor, reason=reason, **extra)
        except (ActionRefused, PermissionDenied) as exc:
            refused[rid] = str(exc)
        else:
            done.append(rid)
    return done, refused


def bulk_approve(retirement_ids, *, actor, reason: str) -> tuple[list, dict]:
    """The approvals queue: approve each id; (approved ids, {id: refusal})."""
    _require(actor, "approve_retirement")
    ids = list(dict.fromkeys(str(i) for i in retirement_ids))
    if len(ids) > MAX_BULK_APPROVE:
        raise ActionRefused(f"Approve at most {MAX_BULK_APPROVE} retirements at a time.")
    if not ids:
        raise ActionRefused("Select at least one retirement to approve.")
    return bulk("approve", ids, actor=actor, reason=reason, limit=MAX_BULK_APPROVE)
