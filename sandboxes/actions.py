"""Operator actions on kept sandboxes and environments: one function each,
shared by the console's buttons and the read-and-act API (docs/architecture.md, operator actions);
the tokens' in sandboxes/token_actions.py.

Every action checks its permission, locks the row, re-reads it, changes it and
writes exactly one audit row with the before and after, all in one transaction.
The reconciler does the provider work; an action only records a decision and
makes the retirement due now.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from sandboxes import audit
from sandboxes.models import ApiToken, Retirement
from sandboxes.models.choices import (
    HoldCode,
    ReceiptKind,
    Stage,
    TokenScope,
)
from sandboxes.proof import approvals_of, fingerprint_of, proof_for
from sandboxes.receipts import write_receipt
from sandboxes.rules.holds import blocking_holds, explanation
from sandboxes.rules.proof import has_approval, proof_key

MAX_BULK_APPROVE = 50
# The longest an operator may hold a sandbox; admins may hold with no end.
MAX_HOLD = timedelta(days=90)
HOLD_FIELDS = (
    "operator_hold_reason",
    "operator_hold_by",
    "operator_hold_at",
    "operator_hold_until",
)

# What an API token may do: an operator-scope token the operators' buttons,
# nothing more; both it and a reviewer-scope token read, salvage included.
_TOKEN_PERMISSIONS: dict[str, set[str]] = {
    TokenScope.OPERATOR: {
        "approve_retirement",
        "retry_retirement",
        "hold_retirement",
        "download_salvage",
    },
    TokenScope.REVIEWER: {"download_salvage"},
}


@dataclass(frozen=True)
class KeepLinkHolder:
    """A task's owner acting through the keep link of a notice (sandboxes/keeping.py):
    no console login, and the one thing it may do is a timed hold
    (docs/rules.md, kept by the owner). `audit_label` names them in the audit
    row, whose user is None: no console user acted."""

    audit_label: str


class ActionRefused(Exception):
    """The action is not allowed in the record's current state; the message says why."""


class BadInput(ActionRefused):
    """A value given to the action is not one it takes; the message names the field."""


def actor_label(actor) -> str:
    if isinstance(actor, ApiToken):
        return f"token:{actor.name}"
    if isinstance(actor, KeepLinkHolder):
        return actor.audit_label
    return actor.get_username()


def can(actor, codename: str) -> bool:
    if isinstance(actor, ApiToken):
        return actor.revoked_at is None and codename in _TOKEN_PERMISSIONS.get(actor.scope, set())
    if isinstance(actor, KeepLinkHolder):
        return codename == "hold_retirement"  # it only ever holds
    return bool(
        actor is not None
        and getattr(actor, "is_authenticated", False)
        and actor.has_perm(f"sandboxes.{codename}")
    )


def _require(actor, codename: str) -> None:
    if not can(actor, codename):
        raise PermissionDenied(f"{codename.replace('_', ' ')} is not allowed for this account")


def _storable(text: str) -> str:
    """PostgreSQL text and jsonb cannot hold NUL and UTF-8 cannot encode a lone
    surrogate (both arrive through JSON): refuse them here, not with a 500 at the INSERT."""
    if "\x00" in text:
        raise ActionRefused("Text cannot contain NUL characters.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ActionRefused("Text must be valid Unicode.") from None
    return text


def _note(text: str | None) -> str:
    """An optional reason (tokens): stripped, storable, bounded."""
    text = _storable((text or "").strip())
    if len(text) > 2000:
        raise ActionRefused("Keep the reason under 2,000 characters.")
    return text


def _reason(reason: str | None) -> str:
    reason = _note(reason)
    if not reason:
        raise ActionRefused("A reason is required.")
    return reason


def snapshot(r: Retirement) -> dict:
    """The fields an operator action can change, as JSON for the audit row."""
    return {
        "stage": r.stage,
        "holds": list(r.holds or []),
        "operator_hold_reason": r.operator_hold_reason,
        "operator_hold_until": r.operator_hold_until.isoformat() if r.operator_hold_until else None,
        "next_attempt_at": r.next_attempt_at.isoformat() if r.next_attempt_at else None,
        "attempts": r.attempts,
        "needs_attention": r.needs_attention,
    }


def _locked(retirement_id, actor) -> Retirement:
    """The record, locked, if `actor` may see it: another company's record is
    "No such kept sandbox", exactly as one that does not exist (README, company scope)."""
    try:
        return (
            Retirement.objects.visible_to(actor)
            .select_for_update(of=("self",))
            .get(pk=retirement_id)
        )
    except (Retirement.DoesNotExist, ValidationError):
        # ValidationError: not a uuid at all (bulk approve takes ids from the form as typed).
        raise ActionRefused("No such kept sandbox.") from None


def _require_open(r: Retirement) -> None:
    if not r.is_open:
        raise ActionRefused(f"This retirement is closed ({r.stage}); nothing is left to do.")


def _save(r: Retirement, *fields: str) -> None:
    r.save(update_fields=[*fields, "updated_at"])


@transaction.atomic
def approve(retirement_id, *, actor, reason: str) -> Retirement:
    """Approve a manual retirement; refused unless it awaits approval and the proof exists."""
    _require(actor, "approve_retirement")
    reason = _reason(reason)
    r = _locked(retirement_id, actor)
    if r.stage != Stage.AWAITING_APPROVAL:
        raise ActionRefused(
            f"Only a retirement awaiting approval can be approved; this one is {r.stage}."
        )
    proof = proof_for(r)
    if not proof:
        raise ActionRefused(
            f"Cannot approve: there is no proof that this sandbox holds no unsaved work "
            f"({proof.reason})."
        )
    if has_approval(r, proof, approvals_of(r)):
        raise ActionRefused("Already approved; the reconciler retires it on its next pass.")
    now = timezone.now()
    before = snapshot(r)
    label = actor_label(actor)
    # Bound to the proof it approves: a new compare or a resumed lease needs a new approval.
    payload = {
        "user": label,
        "reason": reason,
        "proof_receipt_id": proof_key(proof),
        "fingerprint": proof.fingerprint,
    }
    receipt = write_receipt(r, ReceiptKind.APPROVAL, payload=payload, actor=label, at=now)
    r.next_attempt_at = now
    _save(r, "next_attempt_at")
    audit.record(
        actor=actor,
        action="retirement.approve",
        obj=r,
        reason=reason,
        before=before,
        after={**snapshot(r), "receipt": str(receipt.pk), "proof": proof.reason},
    )
    return r


def _require_not_held(r: Retirement) -> None:
    """A retry cannot move a held record: every hold blocks every step (docs/rules.md, holds)
    until it clears, and the reconciler re-checks holds on every pass by itself."""
    held = blocking_holds(list(r.holds or []), r.kind)
    if not held and r.stage != Stage.HELD:
        return
    parts = []
    for code in held:
        why = explanation(code, r.hold_reasons)
        parts.append(f"{code.replace('_', ' ')} ({why})" if why else code.replace("_", " "))
    words = "; ".join(parts)
    advice = (
        "Release the operator hold instead."
        if HoldCode.OPERATOR_HOLD in held
        else "The reconciler re-checks it on every pass and moves it on by itself."
    )
    raise ActionRefused(f"Retry can do nothing until the hold clears: {words or 'held'}. {advice}")


@transaction.atomic
def retry(retirement_id, *, actor, reason: str) -> Retirement:
    """Make the retirement due now; the reconciler decides what the next step is."""
    _require(actor, "retry_retirement")
    reason = _reason(reason)
    r = _locked(retirement_id, actor)
    _require_open(r)
    _require_not_held(r)
    before = snapshot(r)
    r.next_attempt_at = timezone.now()
    _save(r, "next_attempt_at")
    audit.record(
        actor=actor,
        action="retirement.retry",
        obj=r,
        reason=reason,
        before=before,
        after=snapshot(r),
    )
    return r


def hold_end(actor, until, now) -> None:
    """The end an operator's hold may take (docs/rules.md, holds): within
    MAX_HOLD; only an admin may hold with no end. Refusals name the field."""
    if until is None:
        if not can(actor, "edit_policy"):  # admins (sandboxes.roles)
            raise BadInput(
                f"until: give the hold an end, at most {MAX_HOLD.days} days from now; "
                "only an admin may hold with no end."
            )
        return
    if until.tzinfo is None:
        raise BadInput("until: give a time with its time zone (UTC if unsure).")
    if until <= now:
        raise BadInput("until: the end of a hold must be in the future.")
    if until > now + MAX_HOLD:
        raise BadInput(f"until: a hold ends within {MAX_HOLD.days} days of now.")


@transaction.atomic
def hold(
    retirement_id, *, actor, reason: str, until=None, context: dict | None = None
) -> Retirement:
    """Hold a sandbox, until `until` or (admins only) until released; a timed hold
    is released by the first pass after it ends (sandboxes/reconciler/hold_ends.py).
    `context`: what the audit row's after says besides the record (a keep link's notice)."""
    _require(actor, "hold_retirement")
    reason = _reason(reason)
    now = timezone.now()
    hold_end(actor, until, now)
    r = _locked(retirement_id, actor)
    _require_open(r)
    if r.operator_hold_reason:
        raise ActionRefused("An operator already holds this sandbox; release that hold first.")
    before = snapshot(r)
    label = actor_label(actor)
    r.operator_hold_reason = reason
    r.operator_hold_by, r.operator_hold_at, r.operator_hold_until = label[:200], now, until
    r.stage = Stage.HELD
    r.holds = [*[h for h in (r.holds or []) if h != HoldCode.OPERATOR_HOLD], HoldCode.OPERATOR_HOLD]
    r.hold_reasons = {
        **(r.hold_reasons or {}),
        HoldCode.OPERATOR_HOLD: f"Held by {label}: {reason}",
    }
    # A hold during a notice period stops it: nothing is retired at retire_after,
    # and after the hold the owner is told again.
    r.retire_after, r.notice_proof = None, ""
    _save(r, *HOLD_FIELDS, "stage", "holds", "hold_reasons", "retire_after", "notice_proof")
    audit.record(
        actor=actor,
        action="retirement.hold",
        obj=r,
        reason=reason,
        before=before,
        after={**snapshot(r), **(context or {})},
    )
    return r


@transaction.atomic
def release_hold(retirement_id, *, actor, reason: str) -> Retirement:
    _require(actor, "hold_retirement")
    reason = _reason(reason)
    r = _locked(retirement_id, actor)
    _require_open(r)
    if not r.operator_hold_reason and HoldCode.OPERATOR_HOLD not in (r.holds or []):
        raise ActionRefused("No operator hold to release on this sandbox.")
    before = snapshot(r)
    r.clear_operator_hold()
    # The stage stays as it is: the reconciler recomputes holds and stage when due.
    r.next_attempt_at = timezone.now()
    _save(r, *HOLD_FIELDS, "holds", "hold_reasons", "next_attempt_at")
    audit.record(
        actor=actor,
        action="retirement.release_hold",
        obj=r,
        reason=reason,
        before=before,
        after=snapshot(r),
    )
    return r


@transaction.atomic
def attest(retirement_id, *, actor, typed_sandbox_id: str, reason: str) -> Retirement:
    """An admin discards the sandbox's unsaved work: the `operator_attested` proof."""
    _require(actor, "attest_retirement")
    reason = _reason(reason)
    r = _locked(retirement_id, actor)
    _require_open(r)
    typed = (typed_sandbox_id or "").strip()
    if typed != r.provider_lease_id:
        raise ActionRefused(
            "Type the sandbox id exactly as shown to confirm that its unsaved work is discarded."
        )
    now = timezone.now()
    before = snapshot(r)
    label = actor_label(actor)
    receipt = write_receipt(
        r,
        ReceiptKind.OPERATOR_ATTESTED,
        # Bound to what the sandbox is now: a resumed lease voids the attestation.
        payload={
            "typed_sandbox_id": typed,
            "reason": reason,
            "user": label,
            "fingerprint": fingerprint_of(r),
        },
        actor=label,
        at=now,
    )
    r.next_attempt_at = now
    _save(r, "next_attempt_at")
    audit.record(
        actor=actor,
        action="retirement.attest",
        obj=r,
        reason=reason,
        before=before,
        after={**snapshot(r), "receipt": str(receipt.pk)},
    )
    return r
