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
