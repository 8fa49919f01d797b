"""Hold evaluation is a pure function over plain data: no database here."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sandboxes.rules.codes import HoldCode, RetirementKind
from sandboxes.rules.holds import (
    HOLD_EXPLANATIONS,
    HOLDS,
    LeaseFacts,
    blocking_holds,
    compute_holds,
    explain,
    explanation,
    phrase,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CLEAR = LeaseFacts(
    lease_id=1,
    status="failed",
    acquired_at=NOW - timedelta(days=3),
    released_at=NOW - timedelta(days=2),
    warm_retention=timedelta(hours=24),
    issue_status="done",
    bound_here=False,
    run_status="failed",
    writer_run_id=None,
    save_state="saved",
    issue_run_live=False,
    recovery_open=False,
    export_pending=False,
    intent_pending=False,
    sandbox_shared=False,
    newer_lease=False,
    has_stop_receipt=True,
)

CASES = {
    HoldCode.RUN_ACTIVE: ({"run_status": "running"}, RetirementKind.ABANDONED_WARM),
    HoldCode.ISSUE_RUN_ACTIVE: ({"issue_run_live": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.RECOVERY_OPEN: ({"recovery_open": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.EXPORT_PENDING: ({"export_pending": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.INTENT_PENDING: ({"intent_pending": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.SANDBOX_SHARED: ({"sandbox_shared": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.NEWER_LEASE: ({"newer_lease": True}, RetirementKind.ABANDONED_WARM),
    HoldCode.NO_STOP_RECEIPT: ({"has_stop_receipt": False}, RetirementKind.ABANDONED_WARM),
    HoldCode.TASK_CAN_RESUME: (
        {"status": "released", "bound_here": True, "issue_status": "in_progress"},
        RetirementKind.CLOSED_RESTORE_SOURCE,
    ),
    HoldCode.WRITER_ACTIVE: ({"writer_run_id": 7}, RetirementKind.ABANDONED_WARM),
    HoldCode.RETENTION: (
        {"status": "released", "released_at": NOW - timedelta(hours=2)},
        RetirementKind.DONE_TASK_WARM,
    ),
    HoldCode.UNKNOWN_AGE: (
        {"status": "released", "released_at": None},
        RetirementKind.DONE_TASK_WARM,
    ),
}


def test_a_clear_candidate_has_no_holds():
    for kind in RetirementKind:
        assert compute_holds(CLEAR, kind, now=NOW) == []


@pytest.mark.parametrize("code", list(CASES))
def test_each_hold_is_computed_alone(code):
    change, kind = CASES[code]
    assert compute_holds(replace(CLEAR, **change), kind, now=NOW) == [code]


def test_operator_hold_comes_from_the_record():
    holds = compute_holds(CLEAR, RetirementKind.ABANDONED_WARM, operator_hold_reason="x", now=NOW)
    assert holds == [HoldCode.OPERATOR_HOLD]
    assert compute_holds(CLEAR, "abandoned_warm", operator_hold_reason="  ", now=NOW) == []


def test_every_code_has_a_one_line_explanation():
    assert set(HOLD_EXPLANATIONS) == {c.value for c in HoldCode}
    assert all("\n" not in text and text for text in HOLD_EXPLANATIONS.values())
    assert explain(["retention"]) == {"retention": HOLD_EXPLANATIONS["retention"]}


def test_a_missing_acquired_at_is_unknown_age_for_every_kind():
    facts = replace(CLEAR, acquired_at=None)
    assert HoldCode.UNKNOWN_AGE in compute_holds(facts, RetirementKind.RESUME_FAILED, now=NOW)


def test_a_failed_row_is_never_resumable():
    facts = replace(CLEAR, status="failed", bound_here=True, issue_status="todo")
    assert HoldCode.TASK_CAN_RESUME not in compute_holds(facts, "abandoned_warm", now=NOW)


STOP_IGNORED = [
    "no_stop_receipt",
    "task_can_resume",
    "writer_active",
    "retention",
    "unknown_age",
    "outside_window",  # a stop is not a destroy (docs/rules.md, the retirement window)
]


@pytest.mark.parametrize(
    "kind", [RetirementKind.STOP_AFTER_UNSUCCESSFUL_RUN, RetirementKind.SUPERSEDED_RUNNING_WARM]
)
@pytest.mark.parametrize("code", [c.value for c in HoldCode])
def test_every_hold_blocks_a_stop_only_step_but_six(kind, code):
    """DOMAIN §2.2, issue 10 item 4 (main: only operator_hold blocked a stop)."""
    expected = [] if code in STOP_IGNORED else [code]
    assert blocking_holds([code], kind) == expected
    assert blocking_holds([code], RetirementKind.ABANDONED_WARM) == [code]


def test_one_table_gives_each_hold_its_line_and_its_list_phrase():
    """The record's page and the list read one table (docs/rules.md, holds)."""
    assert list(HOLDS) == list(HoldCode)
    for code, hold in HOLDS.items():
        assert explanation(code) == hold.explanation
        assert phrase(code) == hold.phrase.format(task="the task", reason="no reason")
        assert phrase(code) != code.replace("_", " ")


def test_a_phrase_names_what_the_record_knows():
    assert phrase(HoldCode.RETENTION) == "inside the retention window"
    assert (
        phrase(HoldCode.RETENTION, retention_until="Dec 1 12:00") == "retention until Dec 1 12:00"
    )
    assert phrase(HoldCode.RUN_ACTIVE, run="1f2e…", run_status="running") == (
        "waiting for run 1f2e… (running)"
    )
    assert phrase(HoldCode.TASK_CAN_RESUME, task="PAP-7") == "PAP-7 can still resume it"
    assert phrase(HoldCode.OPERATOR_HOLD, operator_reason="audit") == "held by an operator: audit"
    assert phrase("not_a_hold") == "not a hold"


def test_an_operator_hold_says_who_why_since_and_until():
    assert phrase(
        HoldCode.OPERATOR_HOLD,
        operator_reason="waiting for the owner",
        operator="alice",
        operator_since="Dec 1 09:00",
        operator_until="Dec 4 09:00",
    ) == ("held by alice: waiting for the owner (since Dec 1 09:00, until Dec 4 09:00)")
    # An admin's hold with no end says so.
    assert phrase(
        HoldCode.OPERATOR_HOLD,
        operator_reason="audit",
        operator="root",
        operator_since="Dec 1 09:00",
    ) == ("held by root: audit (since Dec 1 09:00, until released)")


def test_a_stored_line_that_names_more_than_the_rule_is_the_phrase():
    refused = "Stop not confirmed: the lease's cleanup_status is pending, not success."
    assert phrase(HoldCode.NO_STOP_RECEIPT, reason=refused) == (
        "stop not confirmed: the lease's cleanup_status is pending, not success"
    )
    rule = HOLDS[HoldCode.NO_STOP_RECEIPT].explanation
    assert phrase(HoldCode.NO_STOP_RECEIPT, reason=rule) == "waiting for a confirmed stop"
    # Only the holds whose line can name more: another hold keeps its phrase.
    assert (
        phrase(HoldCode.SANDBOX_SHARED, reason="anything") == "another live lease uses this sandbox"
    )
