"""What a listing does to each record, on plain data (sandboxes/rules/listing.py).

The pass writes this answer (sync_retirements) and the policy preview counts it;
tests/reconciler/test_preview.py checks that the preview then matches the pass.
"""

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from sandboxes.rules.codes import HoldCode, RetirementKind, RetirementMode, Stage
from sandboxes.rules.holds import HOLD_EXPLANATIONS
from sandboxes.rules.listing import (
    LEASE_MOVED,
    NEWER_ROW,
    NOT_A_CANDIDATE,
    RECORD_FIELDS,
    Candidate,
    Does,
    changes_at,
    decide_listing,
    to_rejudge,
)
from sandboxes.rules.next_step import Sync

from .test_holds import CLEAR, NOW

ENV = uuid.uuid4()
WARM = RetirementKind.ABANDONED_WARM


def candidate(sandbox="sb-1", *, lease=None, kind=WARM, mode=RetirementMode.AUTO, **facts):
    lease = lease or uuid.uuid4()
    return Candidate(
        lease, "daytona", sandbox, ENV, mode, kind, replace(CLEAR, lease_id=lease, **facts)
    )


def record(cand, **fields):
    """The open record of `cand`'s lease, listed and clear, as the listing reads it."""
    rec = {
        "id": uuid.uuid4(),
        "lease_id": cand.lease_id,
        "provider": cand.provider,
        "provider_lease_id": cand.provider_lease_id,
        "kind": cand.kind,
        "stage": Stage.LISTED,
        "holds": [],
        "hold_reasons": {},
        "operator_hold_reason": "",
        "started_for_salvage": False,
        "next_attempt_at": NOW - timedelta(minutes=5),
        "claimed_until": None,
        "mode": RetirementMode.AUTO,
        **fields,
    }
    assert set(RECORD_FIELDS) <= set(rec)
    return rec


def decide(records=(), candidates=(), judged=None, **kwargs):
    return decide_listing(list(records), list(candidates), judged or {}, NOW, **kwargs)


def only(decisions):
    (decision,) = decisions
    return decision


# --- a candidate without a record -------------------------------------------------------


def test_a_clear_candidate_is_created_listed_and_due_now():
    d = only(decide(candidates=[candidate()]))
    assert (d.does, d.record, d.stage, d.due_at, d.holds) == (
        Does.CREATE,
        None,
        Stage.LISTED,
        NOW,
        (),
    )
    assert d.due(NOW)


def test_a_held_candidate_is_created_held_with_its_lines():
    d = only(decide(candidates=[candidate(run_status="running")]))
    assert (d.stage, d.due_at, d.blocking) == (Stage.HELD, None, (HoldCode.RUN_ACTIVE,))
    assert d.reasons == {HoldCode.RUN_ACTIVE: HOLD_EXPLANATIONS[HoldCode.RUN_ACTIVE]}
    assert not d.due(NOW)


def test_in_observe_mode_a_created_record_is_not_due():
    d = only(decide(candidates=[candidate(mode=RetirementMode.OBSERVE)]))
    assert (d.stage, d.due_at) == (Stage.LISTED, None)


def test_a_stop_refusal_is_the_no_stop_receipt_line():
    cand = candidate(has_stop_receipt=False)
    why = "the lease's cleanup_status is pending, not success"
    d = only(decide(candidates=[cand], refusals={cand.lease_id: why}))
    assert d.reasons == {HoldCode.NO_STOP_RECEIPT: f"Stop not confirmed: {why}."}


# --- an open record of the candidate's lease: tracked -----------------------------------


def test_a_hold_that_appears_holds_the_record_and_stops_its_notice():
    cand = candidate(run_status="running")
    d = only(decide([record(cand, stage=Stage.NOTICED)], [cand]))
    assert (d.does, d.sync, d.stage, d.due_at) == (Does.TRACK, Sync.HOLD, Stage.HELD, None)
    assert d.rewrite


def test_holds_that_clear_release_the_record_due_now():
    cand = candidate()
    rec = record(cand, stage=Stage.HELD, holds=["run_active"], next_attempt_at=None)
    d = only(decide([rec], [cand]))
    assert (d.sync, d.stage, d.due_at) == (Sync.RELEASE, Stage.LISTED, NOW)
    assert d.rewrite and d.holds == ()


def test_an_unchanged_record_is_not_rewritten():
    cand = candidate(run_status="running")
    line = HOLD_EXPLANATIONS[HoldCode.RUN_ACTIVE]
    rec = record(cand, stage=Stage.HELD, holds=["run_active"], hold_reasons={"run_active": line})
    d = only(decide([rec], [cand]))
    assert d.sync is None and not d.rewrite
    # A line that changed is rewritten, even when the codes did not.
    assert only(decide([{**rec, "hold_reasons": {"run_active": "old words"}}], [cand])).rewrite


def test_an_operators_own_hold_line_is_kept():
    cand = candidate()
    words = {HoldCode.OPERATOR_HOLD: "Held by ana: keep for the audit"}
    rec = record(cand, operator_hold_reason="keep for the audit", hold_reasons=words)
    d = only(decide([rec], [cand]))
    assert d.holds == (HoldCode.OPERATOR_HOLD,) and d.reasons == words


def test_a_claimed_record_is_tracked_and_left_to_its_worker():
    cand = candidate(run_status="running")
    rec = record(cand, claimed_until=NOW + timedelta(minutes=5))
    d = only(decide([rec], [cand]))
    assert (d.does, d.sync, d.claimed, d.stage) == (Does.TRACK, None, True, Stage.LISTED)
    assert d.rewrite and not d.due(NOW)


def test_a_started_sandbox_with_a_hold_is_woken_for_its_worker_to_stop():
    cand = candidate(run_status="running")
    rec = record(cand, started_for_salvage=True, stage=Stage.COMPARING, next_attempt_at=None)
    d = only(decide([rec], [cand]))
    assert (d.sync, d.stage, d.due_at) == (Sync.WAKE, Stage.COMPARING, NOW)


# --- an open record whose lease is no longer the candidate ------------------------------


def test_a_newer_row_on_the_sandbox_dismisses_the_old_record():
    old, new = candidate(), candidate()
    d = only(decide([record(old)], [new]))
    assert (d.does, d.reason, d.candidate) == (Does.DISMISS, NEWER_ROW, None)


@pytest.mark.parametrize(
    "fields", [{"claimed_until": NOW + timedelta(minutes=1)}, {"started_for_salvage": True}]
)
def test_a_record_giving_way_waits_for_its_worker(fields):
    old, new = candidate(), candidate()
    assert only(decide([record(old, **fields)], [new])).does is Does.LEAVE


def test_a_lease_that_stopped_matching_is_dismissed():
    cand = candidate()
    rec = record(cand)
    d = only(decide([rec], [], {cand.lease_id: replace(cand, kind=None)}))
    assert (d.does, d.reason, d.record) == (Does.DISMISS, NOT_A_CANDIDATE, rec)


def test_a_lease_that_names_another_sandbox_now_is_dismissed():
    cand = candidate()
    moved = replace(cand, provider_lease_id="sb-2")
    d = only(decide([record(cand)], [], {cand.lease_id: moved}))
    assert (d.does, d.reason) == (Does.DISMISS, LEASE_MOVED)


def test_a_started_sandbox_no_longer_a_candidate_is_woken_not_dismissed():
    cand = candidate()
    rec = record(cand, started_for_salvage=True, next_attempt_at=None)
    d = only(decide([rec], [], {cand.lease_id: replace(cand, kind=None)}))
    assert (d.does, d.due_at) == (Does.WAKE, NOW)


def test_a_re_judged_lease_still_a_candidate_is_tracked():
    """An older row the task still protects: the record follows its own lease."""
    cand = candidate(newer_lease=True)
    d = only(decide([record(cand)], [], {cand.lease_id: cand}))
    assert (d.does, d.holds, d.sync) == (Does.TRACK, (HoldCode.NEWER_LEASE,), Sync.HOLD)


def test_a_lease_whose_graph_has_placeholders_again_is_left_as_it_is():
    rec = record(candidate())
    assert only(decide([rec], [], {})).does is Does.LEAVE


def test_each_open_record_gets_one_answer():
    tracked, created, moved, gone = candidate("a"), candidate("b"), candidate("c"), candidate("d")
    records = [record(tracked), record(moved), record(gone)]
    # `gone`'s lease is not re-judged: its graph has placeholders again.
    judged = {moved.lease_id: replace(moved, provider_lease_id="z")}
    decisions = decide(records, [tracked, created], judged)
    answered = [d.record["id"] for d in decisions if d.record is not None]
    assert sorted(map(str, answered)) == sorted(str(r["id"]) for r in records)
    assert [d.does for d in decisions] == [Does.TRACK, Does.CREATE, Does.DISMISS, Does.LEAVE]


# --- under another policy (the preview) -----------------------------------------------


def test_a_proposed_policy_decides_with_its_mode_and_retention():
    cand = candidate(kind=RetirementKind.DONE_TASK_WARM, status="released")
    assert only(decide(candidates=[cand])).holds == ()
    longer = only(decide(candidates=[cand], warm_retention=timedelta(days=7)))
    assert longer.holds == (HoldCode.RETENTION,)
    observe = only(decide(candidates=[cand], mode=RetirementMode.OBSERVE))
    assert observe.due_at is None
    rec = record(cand, next_attempt_at=None)
    assert only(decide([rec], [cand])).sync is Sync.WAKE
    assert only(decide([rec], [cand], mode=RetirementMode.OBSERVE)).sync is None


# --- what the listing reads and reports -----------------------------------------------


def test_records_without_their_current_candidate_row_are_re_judged():
    same, other, alone = candidate("a"), candidate("b"), candidate("c")
    records = [record(same), record(other), record(alone)]
    newer = candidate("b")
    assert to_rejudge(records, [same, newer]) == [other.lease_id, alone.lease_id]


def test_the_answer_changes_with_the_clock_at_the_first_retention_end_or_claim_expiry():
    warm = candidate(
        kind=RetirementKind.DONE_TASK_WARM, status="released", released_at=NOW - timedelta(hours=2)
    )
    ends = NOW + timedelta(hours=22)
    assert changes_at(NOW, [warm], [], []) == ends
    soon = NOW + timedelta(minutes=3)
    claimed = record(candidate(), claimed_until=soon)
    assert changes_at(NOW, [warm], [], [claimed]) == soon
    assert changes_at(NOW, [candidate()], [], [record(candidate())]) is None


# --- the retirement window (docs/rules.md, the retirement window) ----------------------


def _tuesdays():
    from datetime import time

    from sandboxes.rules.window import window_from

    # NOW is Monday 12:00 UTC: closed, opening Tuesday 09:00 Berlin (08:00 UTC).
    return window_from("Europe/Berlin", "tue", time(9), time(17))


def test_a_candidate_outside_the_window_is_created_held_until_the_opening():
    window = _tuesdays()
    d = only(decide(candidates=[candidate(window=window)]))
    opens = window.next_opening(NOW)
    assert opens == NOW.replace(hour=8) + timedelta(days=1)
    assert (d.does, d.stage, d.holds, d.due_at, d.window_opens) == (
        Does.CREATE,
        Stage.HELD,
        (HoldCode.OUTSIDE_WINDOW,),
        opens,
        opens,
    )
    assert not d.due(NOW)


def test_a_record_moved_to_held_by_the_window_gets_the_opening_as_its_next_attempt():
    window = _tuesdays()
    cand = candidate(window=window)
    noticed = record(cand, stage=Stage.NOTICED)
    d = only(decide([noticed], [cand]))
    assert (d.sync, d.stage, d.due_at) == (Sync.HOLD, Stage.HELD, window.next_opening(NOW))
    # Already held by something else, then by the window alone: the opening too.
    held = record(cand, stage=Stage.HELD, next_attempt_at=None)
    assert only(decide([held], [cand])).due_at == window.next_opening(NOW)


def test_the_window_with_another_hold_waits_for_that_hold_not_the_clock():
    cand = candidate(window=_tuesdays(), run_status="running")
    d = only(decide([record(cand)], [cand]))
    assert d.stage == Stage.HELD and d.due_at is None and d.window_opens is None


def test_a_proposed_window_replaces_the_environments_own():
    cand = candidate(window=_tuesdays())
    assert only(decide(candidates=[cand], window=None)).stage == Stage.LISTED
    assert only(decide(candidates=[candidate()], window=_tuesdays())).stage == Stage.HELD
    assert changes_at(NOW, [cand], [], []) == _tuesdays().next_opening(NOW)
