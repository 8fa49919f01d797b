"""The wave's invariants catch what they claim to, whatever shortcuts the harness
takes to converge fast (ending dead workers' claims, skipping retry backoff)."""

import pytest

from devtools.chaos import invariants as inv
from devtools.chaos.fleet import build_fleet

pytestmark = pytest.mark.django_db


def call(sandbox, request_id, status=200, at="2026-01-01T00:00:00+00:00", op="destroy"):
    return {
        "sandbox_id": sandbox,
        "request_id": request_id,
        "status": status,
        "at": at,
        "operation": op,
        "method": "DELETE" if op == "destroy" else "GET",
    }


def test_two_sequential_destroy_operations_are_a_duplicate():
    calls = [
        call("sb-1", "first", at="2026-01-01T00:00:00+00:00"),
        call("sb-1", "first", op="get", status=404, at="2026-01-01T00:00:01+00:00"),
        # Long after the first finished: a second worker destroying again.
        call("sb-1", "second", at="2026-01-01T00:05:00+00:00"),
    ]
    found = inv.duplicate_destroys(build_fleet(1), calls)
    assert [d["sandbox"] for d in found] == ["sb-1"]


def test_overlapping_destroy_operations_are_a_duplicate():
    calls = [call("sb-2", "a"), call("sb-2", "b")]
    assert inv.duplicate_destroys(build_fleet(1), calls)


def test_retries_of_one_operation_and_404s_are_not_duplicates():
    calls = [
        call("sb-3", "op", status=503),
        call("sb-3", "op", status=0),
        call("sb-3", "op"),
        call("sb-3", "op"),  # the provider asks again while it reads `destroying`
        call("sb-3", "later", status=404),
        call("sb-4", "other"),
    ]
    assert inv.duplicate_destroys(build_fleet(1), calls) == []


def test_a_sandbox_the_console_started_and_left_running_is_caught():
    calls = [
        call("sb-5", "s1", op="start"),  # started for a compare, never stopped
        call("sb-6", "s2", op="start"),
        call("sb-6", "s3", op="stop"),
        call("sb-7", "s4", op="start", status=409),  # refused: it never started
    ]
    alive = {"sb-5": "started", "sb-6": "stopped", "sb-7": "started", "sb-8": "started"}
    found = inv.left_started_by_inspection(calls, alive)
    # sb-8 was running before the wave (the console never started it): kept as found.
    assert [x["sandbox"] for x in found] == ["sb-5"]


def test_a_record_still_flagged_started_for_salvage_is_caught():
    from tests import factories as f

    record = f.RetirementFactory(started_for_salvage=True)
    found = inv.left_started_by_inspection([], {})
    assert [x["sandbox"] for x in found] == [record.provider_lease_id]
    assert record.stage in found[0]["why"]


def test_a_claim_that_compared_twice_is_caught():
    compares = {("r1", "a1"): 1, ("r1", "a2"): 2, ("r2", "a3"): 1}
    assert inv.repeated_compares(compares) == [{"retirement": "r1", "attempt": "a2", "compares": 2}]
