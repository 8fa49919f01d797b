"""A listing row becomes the candidate the constructors would make: every
LeaseFacts and Candidate field set (sandboxes/rules/frozen.py skips __init__)."""

import dataclasses
import uuid
from datetime import UTC, datetime, time, timedelta

import pytest

from sandboxes.reconciler import candidates
from sandboxes.rules.holds import LeaseFacts
from sandboxes.rules.listing import Candidate
from sandboxes.rules.window import stored_window

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _row(other_rows, what, window) -> tuple:
    values = {
        "id": uuid.uuid4(),
        "status": "released",
        "acquired_at": NOW - timedelta(days=3),
        "released_at": None,
        "environment__warm_retention": timedelta(hours=24),
        "issue__status": "done",
        "bound_here": True,
        "heartbeat_run__status": "succeeded",
        "execution_workspace__writer_run_id": uuid.uuid4(),
        "execution_workspace__save_state": "saved",
        "issue_run_live": False,
        "recovery_open_lease": True,
        "export_pending": False,
        "intent_pending": True,
        "newer_lease": False,
        "has_stop_receipt": True,
        "other_rows": other_rows,
        "provider": "daytona",
        "provider_lease_id": "sbx-1",
        "environment_id": uuid.uuid4(),
        "environment__retirement_mode": "auto",
        "kind": "done_task_warm",
        "recovery_open_what": what,
        "environment__time_zone": window[0],
        "environment__window_days": window[1],
        "environment__window_start": window[2],
        "environment__window_end": window[3],
    }
    assert tuple(values) == candidates.FACT_FIELDS
    return tuple(values.values())


def _constructed(row: tuple) -> Candidate:
    """The candidate as LeaseFacts' and Candidate's constructors make it."""
    v = dict(zip(candidates.FACT_FIELDS, row, strict=True))
    bits = v["other_rows"] or 0
    facts = LeaseFacts(
        lease_id=v["id"],
        status=v["status"],
        acquired_at=v["acquired_at"],
        released_at=v["released_at"],
        warm_retention=v["environment__warm_retention"],
        issue_status=v["issue__status"],
        bound_here=v["bound_here"],
        run_status=v["heartbeat_run__status"],
        writer_run_id=v["execution_workspace__writer_run_id"],
        save_state=v["execution_workspace__save_state"],
        issue_run_live=v["issue_run_live"],
        recovery_open=v["recovery_open_lease"],
        export_pending=v["export_pending"],
        intent_pending=v["intent_pending"],
        sandbox_shared=bool(bits & candidates.SANDBOX_SHARED),
        newer_lease=v["newer_lease"],
        has_stop_receipt=v["has_stop_receipt"],
        resumable_elsewhere=bool(bits & candidates.RESUMABLE_ELSEWHERE),
        undated_row=bool(bits & candidates.UNDATED_ROW),
        provider=v["provider"],
        recovery_action=candidates.recovery_words(v["recovery_open_what"]),
        window=stored_window(*row[-4:]),
    )
    return Candidate(
        v["id"],
        v["provider"],
        v["provider_lease_id"],
        v["environment_id"],
        v["environment__retirement_mode"],
        v["kind"],
        facts,
    )


@pytest.mark.parametrize(
    "other_rows, what, window",
    [
        (None, None, ("", "", None, None)),
        (7, "workspace_restore|PAP-1", ("Europe/Paris", "mon,tue", time(9), time(17))),
        (2, "", ("UTC", "", time(22), time(6))),
    ],
)
def test_a_row_becomes_the_candidate_the_constructors_make(other_rows, what, window):
    row = _row(other_rows, what, window)
    built, made = candidates._to_candidate(row), _constructed(row)
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    for got, want in ((built, made), (built.facts, made.facts)):
        assert type(got) is type(want)
        assert vars(got) == vars(want)
        assert set(vars(got)) == {f.name for f in dataclasses.fields(want)}
