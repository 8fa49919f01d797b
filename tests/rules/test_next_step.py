"""next_step: the one decision the machine and the policy preview share."""

from datetime import UTC, datetime

from sandboxes.rules.codes import RetirementKind, RetirementMode
from sandboxes.rules.next_step import Next, Situation, next_step

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def situation(kind, **overrides):
    fields = {
        "kind": kind,
        "blocking": (),
        "mode": RetirementMode.AUTO,
        "started": False,
        "proof": False,
        "approved": False,
        "notice": None,
        "notice_valid": False,
        "retire_after": None,
        "under_cap": True,
        **overrides,
    }
    return Situation(**fields)


def test_a_receipt_kind_without_proof_salvages():
    assert next_step(situation(RetirementKind.ABANDONED_WARM), NOW) == Next.SALVAGE


def test_resume_failed_without_its_replacement_proof_is_never_salvaged():
    """Seed 004: never started or compared; the preview counts it as a retry."""
    step = next_step(situation(RetirementKind.RESUME_FAILED), NOW)
    assert step == Next.UNPROVED
    proved = situation(RetirementKind.RESUME_FAILED, proof=True)
    assert next_step(proved, NOW) == Next.RETIRE
