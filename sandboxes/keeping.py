"""Using a keep link (docs/rules.md, kept by the owner): the owner's hold of 7
days, made through the operators' own hold (`actions.hold`: the same audit row,
stage change and destroy-gate refusal), once per notice, and only while the
sandbox is what the notice saw. The link itself is `sandboxes/keep_links.py`.

`look` answers the link's GET and writes nothing (mail scanners open links);
`keep` answers its POST: under the record's row lock it checks the use, the
record and the fingerprint, then writes the use and the hold in one
transaction, so two clicks at once hold once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction

from sandboxes import actions
from sandboxes.explain import when_zoned
from sandboxes.keep_links import KEEP_FOR, KeepLink, LinkRefused, fingerprint_digest
from sandboxes.models import KeepLinkUse, Retirement
from sandboxes.models.choices import Stage
from sandboxes.proof import fingerprint_of

# The reason every keep's hold and audit row gives.
KEEP_REASON = "kept by the owner from the notice"


class AlreadyUsed(LinkRefused):
    status = 410


class NotKeepable(LinkRefused):
    """The record is closed, held already, or its sandbox moved since the notice."""

    status = 409


@dataclass(frozen=True)
class Kept:
    retirement: Retirement
    held_by: str
    until: datetime


def _use_of(link: KeepLink) -> KeepLinkUse | None:
    return KeepLinkUse.objects.filter(
        retirement_id=link.retirement_id, notice_event_id=link.notice_event_id
    ).first()


def _refusal(link: KeepLink, r: Retirement | None) -> LinkRefused | None:
    """Why the link cannot hold this record now, checked in this order; None: it can."""
    use = _use_of(link)
    if use is not None:
        return AlreadyUsed(
            f"This keep link was already used: kept by {use.owner_label} "
            f"until {when_zoned(use.held_until)}."
        )
    if r is None or not r.is_open:
        if r is not None and r.stage == Stage.RETIRED:
            return NotKeepable("This sandbox was already retired: there is nothing left to keep.")
        return NotKeepable(
            "The console no longer plans to retire this sandbox: there is nothing to keep."
        )
    if fingerprint_digest(fingerprint_of(r)) != link.fingerprint:
        return NotKeepable(
            "This sandbox changed since the notice (it was resumed, stopped again or "
            "saved again), so this link no longer holds it. The console gives a new "
            "notice before it retires it."
        )
    if r.operator_hold_reason:
        until = f" until {when_zoned(r.operator_hold_until)}" if r.operator_hold_until else ""
        # Who holds it is the console's to show, behind its login.
        return NotKeepable(f"This sandbox is already held{until}: it is kept, nothing to do.")
    return None


def look(link: KeepLink) -> Retirement:
    """The record a valid link names, if it can still be kept (the GET): raises
    the refusal otherwise. Writes nothing."""
    r = (
        Retirement.objects.with_owners()
        .select_related("environment")
        .filter(pk=link.retirement_id)
        .first()
    )
    refusal = _refusal(link, r)
    if refusal is not None:
        raise refusal
    assert r is not None
    return r


@transaction.atomic
def keep(link: KeepLink, *, now: datetime) -> Kept:
    """Hold the record for KEEP_FOR, attributed to the link's owner (the POST)."""
    r = Retirement.objects.select_for_update(of=("self",)).filter(pk=link.retirement_id).first()
    refusal = _refusal(link, r)
    if refusal is not None:
        raise refusal
    assert r is not None
    until = now + KEEP_FOR
    holder = actions.KeepLinkHolder(audit_label=link.owner_label[:200])
    try:
        with transaction.atomic():
            KeepLinkUse.objects.create(
                retirement=r,
                notice_event_id=link.notice_event_id,
                owner_user_id=link.owner_user_id[:255],
                owner_label=holder.audit_label,
                held_until=until,
            )
    except IntegrityError:  # pragma: no cover - the row lock orders two clicks first
        raise AlreadyUsed("This keep link was already used.") from None
    try:
        kept = actions.hold(
            r.pk,
            actor=holder,
            reason=KEEP_REASON,
            until=until,
            context={
                "keep_link": {
                    "notice_event_id": str(link.notice_event_id),
                    "owner_user_id": link.owner_user_id,
                    "owner_email": link.owner_email,
                }
            },
        )
    except actions.ActionRefused as exc:
        raise NotKeepable(str(exc)) from None
    return Kept(retirement=kept, held_by=holder.audit_label, until=until)
