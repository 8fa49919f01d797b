"""What Paperclip's proof predicates read, through ingest (docs/rules.md,
proof): each upsert's optional `company_id`, and a receipt's `company_id`,
`builtin_provider`, `method`, `plugin_id` and `request_id`, the fields
Paperclip's receipts carry (sandbox-stop-and-retain.ts settleStopOnlyCleanup
at c5df623). All optional: a client that sends none keeps working, and a
receipt lacking one is recorded (it proves nothing where the predicate needs
it). A bad value is a 400 naming the field, on the fast path and the detailed
path alike."""

import json

import pytest
from django.apps import apps

from devtools.events import event, graph, uid
from sandboxes import models as m
from sandboxes.ingest import schemas as s

from .test_ingest_fast_path import same, slow

pytestmark = pytest.mark.django_db

UPSERTS = {
    "environment.upserted": (m.Environment, "environment_id"),
    "issue.upserted": (m.Issue, "issue_id"),
    "workspace.upserted": (m.ExecutionWorkspace, "workspace_id"),
    "run.upserted": (m.HeartbeatRun, "run_id"),
    "lease.upserted": (m.EnvironmentLease, "lease_id"),
    "recovery_action.upserted": (m.RecoveryAction, "action_id"),
}


def counts() -> list[int]:
    return [
        model.objects.count()
        for model in apps.get_app_config("sandboxes").get_models()
        if model is not m.ApiToken
    ]


def body(events: list[dict], *, detailed: bool) -> str:
    # An unknown top-level key is what the fast path cannot vouch for: the
    # same events then go through the detailed path (decode_json + validate_batch).
    return json.dumps({"events": events} | ({"x": 1} if detailed else {}))


def company_batch(company: str) -> tuple[dict, list[dict]]:
    ids, events = graph()
    events.append(
        event(
            "recovery_action.upserted",
            {"action_id": uid(), "issue_id": ids["issue"], "kind": "k", "status": "active"},
        )
    )
    ids["action"] = events[-1]["data"]["action_id"]
    for e in events:
        e["data"]["company_id"] = company
    return ids, events


def receipt(ids: dict, **fields) -> dict:
    return event(
        "receipt.recorded",
        {
            "lease_id": ids["lease"],
            "kind": "stop_and_retain",
            "run_id": ids["run"],
            "provider_lease_id": "sbx-1",
            "confirmed_at": "2026-11-01T03:00:00.120Z",
            **fields,
        },
    )


@pytest.mark.parametrize("detailed", [False, True], ids=["fast", "detailed"])
def test_every_upsert_stores_its_company(post_events, detailed):
    company = uid()
    ids, events = company_batch(company)
    response = post_events(None, body=body(events, detailed=detailed))
    assert response.status_code == 200, response.content
    for e in events:
        model, key = UPSERTS[e["type"]]
        assert str(model.objects.get(pk=e["data"][key]).company_id) == company, e["type"]


def test_a_later_upsert_without_a_company_keeps_it_and_null_clears_it(post_events):
    company = uid()
    ids, events = company_batch(company)
    assert post_events(events).status_code == 200
    lease = next(e for e in events if e["type"] == "lease.upserted")
    later = {**lease, "id": uid(), "occurred_at": "2026-11-01T01:00:00Z"}
    later["data"] = {k: v for k, v in lease["data"].items() if k != "company_id"}
    assert post_events([later]).status_code == 200
    row = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert str(row.company_id) == company  # absent: unchanged, like every optional field
    cleared = {**later, "id": uid(), "occurred_at": "2026-11-01T02:00:00Z"}
    cleared["data"] = {**later["data"], "company_id": None}
    assert post_events([cleared]).status_code == 200
    row.refresh_from_db()
    assert row.company_id is None


def test_existing_clients_send_no_company_and_keep_working(post_events):
    ids, events = graph()
    events.append(receipt(ids))
    response = post_events(events)
    assert response.status_code == 200, response.content
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).company_id is None
    assert m.Issue.objects.get(pk=ids["issue"]).company_id is None
    stop = m.Receipt.objects.get()
    assert stop.company_id is None
    # Recorded as sent: the payload says what is missing, for the predicate.
    for field in ("company_id", "builtin_provider", "method", "plugin_id", "request_id"):
        assert stop.payload[field] is None, field


@pytest.mark.parametrize("detailed", [False, True], ids=["fast", "detailed"])
def test_a_receipt_keeps_paperclips_fields(post_events, detailed):
    company = uid()
    ids, events = company_batch(company)
    events.append(
        receipt(
            ids,
            company_id=company,
            builtin_provider="daytona",
            method="builtin.stopLease",
            request_id="req-7",
        )
    )
    events.append(
        receipt(
            ids,
            kind="termination",
            state="stopped",
            company_id=company,
            plugin_id="acme.sandboxes",
            method="environmentStopLease",
        )
    )
    response = post_events(None, body=body(events, detailed=detailed))
    assert response.status_code == 200, response.content
    stop = m.Receipt.objects.get(kind="stop_and_retain")
    assert str(stop.company_id) == company and stop.request_id == "req-7"
    assert {k: stop.payload[k] for k in ("builtin_provider", "method", "plugin_id")} == {
        "builtin_provider": "daytona",
        "method": "builtin.stopLease",
        "plugin_id": None,
    }
    assert stop.payload["company_id"] == company
    assert stop.payload["confirmed_at"] == "2026-11-01T03:00:00.120000Z"
    end = m.Receipt.objects.get(kind="termination")
    assert (end.payload["plugin_id"], end.payload["method"]) == (
        "acme.sandboxes",
        "environmentStopLease",
    )
    assert end.payload["builtin_provider"] is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("company_id", "acme"),
        ("company_id", 42),
        ("builtin_provider", "d" * 65),
        ("builtin_provider", 5),
        ("method", "m" * 101),
        ("method", ["builtin.stopLease"]),
        ("plugin_id", "p" * 201),
        ("plugin_id", True),
    ],
)
def test_a_bad_receipt_field_is_a_400_naming_it(post_events, field, value):
    ids, events = graph()
    events.append(receipt(ids, **{field: value}))
    before = counts()
    response = post_events(events)
    assert response.status_code == 400, response.content
    paths = {(e["index"], e["path"]) for e in response.json()["errors"]}
    assert any(i == 5 and p.startswith(f"data.{field}") for i, p in paths), paths
    assert counts() == before


@pytest.mark.parametrize("type_", sorted(UPSERTS))
def test_a_bad_company_on_any_upsert_is_a_400_naming_it(post_events, type_):
    _, events = company_batch(uid())
    index = next(i for i, e in enumerate(events) if e["type"] == type_)
    events[index]["data"]["company_id"] = "not-a-uuid"
    before = counts()
    response = post_events(events)
    assert response.status_code == 400, response.content
    paths = {(e["index"], e["path"]) for e in response.json()["errors"]}
    assert any(i == index and p.startswith("data.company_id") for i, p in paths), paths
    assert counts() == before


def test_both_paths_validate_the_new_fields_to_the_same_values():
    company = uid()
    ids, events = company_batch(company)
    events.append(
        receipt(ids, company_id=company, builtin_provider="daytona", method="builtin.stopLease")
    )
    events.append(receipt(ids, kind="termination", state="stopped", plugin_id="p", method=""))
    raw = json.dumps({"events": events}).encode()
    batch, errors = slow(raw)
    assert not errors
    same(batch, s.fast_validate_body(raw, max_events=1000))
    same(batch, s.fast_validate_lines([json.dumps(e) for e in events]))
    # The company is an id: a canonical string to the fold, whichever path.
    for e in s.plain_ids(batch):
        if "company_id" in e.data.model_fields_set:
            assert e.data.company_id == company, e.type
