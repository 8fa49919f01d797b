"""decide.next_step: the one decision the machine and the policy preview share."""

from datetime import UTC, datetime

from sandboxes.models.choices import RetirementKind, RetirementMode
from sandboxes.reconciler import decide

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
    return decide.Situation(**fields)


def test_a_receipt_kind_without_proof_salvages():
    assert decide.next_step(situation(RetirementKind.ABANDONED_WARM), NOW) == decide.SALVAGE


def test_resume_failed_without_its_replacement_proof_is_never_salvaged():
    """Seed 004: never started or compared; the preview counts it as a retry."""
    step = decide.next_step(situation(RetirementKind.RESUME_FAILED), NOW)
    assert step == decide.UNPROVED
    proved = situation(RetirementKind.RESUME_FAILED, proof=True)
    assert decide.next_step(proved, NOW) == decide.RETIRE
