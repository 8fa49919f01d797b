"""The one builder of ingest events (devtools/events.py) speaks the schema the
console accepts: one builder per event type, and everything the demo fleet, the
chaos fleet and the tests build from it validates."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from devtools import demo
from devtools.chaos.fleet import build_fleet, case_events
from devtools.events import EPOCH, Events, graph, manifest, rfc3339, uid
from sandboxes.ingest.schemas import EVENT_TYPES, validate_batch


def assert_valid(events: list[dict]) -> None:
    validated, errors = validate_batch({"events": events}, max_events=len(events) + 1)
    assert errors == []
    assert len(validated) == len(events)


def one_of_each(ev: Events) -> list[dict]:
    env, issue, ws, run, lease, company, agent = (uid() for _ in range(7))
    return [
        ev.company(company, "Acme"),
        ev.user("u-dana", "Dana", "dana@acme.test"),
        ev.agent(agent, "coder", company_id=company),
        ev.environment(env, "env", "daytona", retirement_mode="manual"),
        ev.issue(
            issue,
            "in_progress",
            key="PAP-1",
            bound_workspace_id=ws,
            company_id=company,
            assignee_agent_id=agent,
            created_by_user_id="u-dana",
        ),
        ev.workspace(ws, issue, saved_at=EPOCH, saved_manifest=manifest({"a.txt": b"a"})),
        ev.run(run, issue, "failed"),
        ev.lease(
            lease,
            environment_id=env,
            provider="daytona",
            provider_lease_id="sbx-1",
            status="failed",
            lease_policy="reuse_by_environment",
            acquired_at=datetime(2026, 11, 1, tzinfo=UTC),
            issue_id=issue,
            workspace_id=ws,
            run_id=run,
        ),
        ev.released(lease, "stop_and_retain"),
        ev.receipt(lease, run_id=run, provider_lease_id="sbx-1", confirmed_at=EPOCH),
        ev.intent(uid(), lease, "restore", "pending"),
        ev.export(uid(), lease, "pending"),
        ev.recovery_action(uid(), issue, "active", lease_id=lease),
    ]


def test_there_is_one_builder_per_event_type_and_each_validates():
    events = one_of_each(Events())
    assert sorted(e["type"] for e in events) == sorted(EVENT_TYPES)
    assert_valid(events)


def test_times_are_rfc3339_in_utc_and_ids_follow_the_builders_rule():
    berlin = timezone(timedelta(hours=1))
    ev = Events(ids=lambda n, type_: f"{type_}/{n}", at=datetime(2026, 11, 1, 1, tzinfo=berlin))
    first = ev.run(uid(), uid(), "running", started_at=datetime(2026, 11, 1, tzinfo=UTC))
    second = ev.issue(uid(), "done", at=EPOCH)
    assert first["id"] == "run.upserted/0"
    assert first["occurred_at"] == "2026-11-01T00:00:00Z"
    assert first["data"]["started_at"] == "2026-11-01T00:00:00Z"
    assert second["id"] == "issue.upserted/1"
    assert rfc3339("2026-11-01T00:00:00+00:00") == "2026-11-01T00:00:00+00:00"  # sent as given
    with pytest.raises(ValueError, match="no time zone"):
        rfc3339(datetime(2026, 11, 1))


def test_the_tests_graph_validates():
    _ids, events = graph()
    assert_valid(events)


def test_the_demo_fleet_validates():
    assert_valid(demo.demo_events() + demo.newer_lease_events())


def test_the_chaos_fleet_validates():
    fleet = build_fleet(7)
    events = list(fleet.events)
    for number, case in enumerate(fleet.cases):
        case.sandbox_id = f"sbx-chaos-{number}"
        events += case_events(fleet, case) + case.late_events + case.post_listing_events
    assert_valid(events)
