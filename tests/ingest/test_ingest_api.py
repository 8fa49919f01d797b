"""POST /api/v1/events (DOMAIN §4.1)."""

import json
import uuid

import pytest
from django.apps import apps

from devtools.events import event, graph, uid
from sandboxes import models as m

pytestmark = pytest.mark.django_db


def row_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in apps.get_app_config("sandboxes").get_models()
        if model is not m.ApiToken
    }


def test_it_accepts_a_batch_and_counts_it(post_events):
    _, events = graph()
    response = post_events(events)
    assert response.status_code == 200
    assert response.json() == {"accepted": 5, "duplicates": 0, "warnings": []}


def test_it_rejects_get(client, ingest_token):
    _, raw = ingest_token
    assert client.get("/api/v1/events", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 405


class TestRoundTrip:
    """Every event type lands in the models with its values."""

    def test_environment(self, post_events):
        env = uid()
        data = {
            "environment_id": env,
            "name": "daytona-eu",
            "provider": "daytona",
            "driver": "sandbox",
            "retirement_mode": "manual",
            "warm_retention_hours": 6,
            "max_retirements_per_pass": 7,
            "workspace_root": "/home/daytona/workspace",
        }
        assert post_events([event("environment.upserted", data)]).status_code == 200
        row = m.Environment.objects.get(pk=env)
        assert (row.name, row.provider, row.driver, row.retirement_mode) == (
            "daytona-eu",
            "daytona",
            "sandbox",
            "manual",
        )
        assert row.warm_retention.total_seconds() == 6 * 3600
        assert (row.max_retirements_per_pass, row.workspace_root) == (7, "/home/daytona/workspace")
        assert not row.placeholder

    def test_environment_defaults_to_observe(self, post_events):
        env = uid()
        post_events(
            [
                event(
                    "environment.upserted",
                    {"environment_id": env, "name": "e", "provider": "local"},
                )
            ]
        )
        row = m.Environment.objects.get(pk=env)
        assert (row.retirement_mode, row.max_retirements_per_pass, row.workspace_root) == (
            "observe",
            50,
            "workspace",
        )
        assert row.warm_retention.total_seconds() == 24 * 3600

    def test_issue_workspace_run_and_lease(self, post_events):
        ids, events = graph(lease_status="retained", policy="retain_on_failure")
        manifest = {"src/a.py": {"sha256": "a" * 64, "size": 12}}
        events += [
            event(
                "workspace.upserted",
                {
                    "workspace_id": ids["ws"],
                    "issue_id": ids["issue"],
                    "save_state": "saved",
                    "saved_at": "2026-11-01T01:00:00Z",
                    "final_checkpoint_at": "2026-11-01T01:00:05Z",
                    "saved_manifest": manifest,
                    "writer_run_id": ids["run"],
                },
            ),
            event(
                "run.upserted",
                {
                    "run_id": ids["run"],
                    "issue_id": ids["issue"],
                    "status": "failed",
                    "started_at": "2026-11-01T00:00:00Z",
                    "finished_at": "2026-11-01T00:30:00Z",
                },
            ),
            event(
                "lease.upserted",
                {
                    "lease_id": ids["lease"],
                    "environment_id": ids["env"],
                    "provider": "daytona",
                    "provider_lease_id": "sbx-9",
                    "status": "retained",
                    "lease_policy": "retain_on_failure",
                    "acquired_at": "2026-11-01T00:00:00Z",
                    "released_at": "2026-11-01T00:31:00Z",
                    "expires_at": "2026-11-02T00:00:00Z",
                    "last_used_at": "2026-11-01T00:30:00Z",
                    "failure_reason": "resume_failed",
                    "cleanup_status": "pending",
                    "disposition": "stop_and_retain",
                    "metadata": {"remoteCwd": "/home/daytona/w"},
                },
            ),
        ]
        assert post_events(events).status_code == 200
        issue = m.Issue.objects.get(pk=ids["issue"])
        assert (issue.key, issue.status, str(issue.bound_workspace_id)) == (
            "PAP-142",
            "in_progress",
            ids["ws"],
        )
        ws = m.ExecutionWorkspace.objects.get(pk=ids["ws"])
        assert ws.saved_manifest == manifest
        assert (ws.save_state, str(ws.writer_run_id)) == ("saved", ids["run"])
        assert ws.final_checkpoint_at.isoformat() == "2026-11-01T01:00:05+00:00"
        run = m.HeartbeatRun.objects.get(pk=ids["run"])
        assert (run.status, str(run.issue_id)) == ("failed", ids["issue"])
        assert run.finished_at.isoformat() == "2026-11-01T00:30:00+00:00"
        lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
        assert (lease.provider, lease.provider_lease_id, lease.status, lease.lease_policy) == (
            "daytona",
            "sbx-9",
            "retained",
            "retain_on_failure",
        )
        assert (lease.failure_reason, lease.cleanup_status, lease.disposition) == (
            "resume_failed",
            "pending",
            "stop_and_retain",
        )
        assert lease.metadata == {"remoteCwd": "/home/daytona/w"}
        assert lease.expires_at.isoformat() == "2026-11-02T00:00:00+00:00"
        assert str(lease.execution_workspace_id) == ids["ws"]
        assert str(lease.heartbeat_run_id) == ids["run"]
        assert not any(r.placeholder for r in (issue, ws, run, lease))

    def test_receipt(self, post_events):
        ids, events = graph()
        events.append(
            event(
                "receipt.recorded",
                {
                    "lease_id": ids["lease"],
                    "kind": "termination",
                    "state": "stopped",
                    "run_id": ids["run"],
                    "provider_lease_id": "sbx-1",
                    "confirmed_at": "2026-11-01T03:00:00Z",
                    "request_id": "req-1",
                },
            )
        )
        events.append(
            event(
                "receipt.recorded",
                {
                    "lease_id": ids["lease"],
                    "kind": "stop_and_retain",
                    "run_id": ids["run"],
                    "provider_lease_id": "sbx-1",
                    "confirmed_at": "2026-11-01T03:00:01Z",
                },
            )
        )
        assert post_events(events).status_code == 200
        termination, stop = m.Receipt.objects.order_by("confirmed_at")
        assert (termination.kind, termination.state, termination.schema) == (
            "termination",
            "stopped",
            "paperclip.remote-termination.v1",
        )
        assert (termination.request_id, termination.provider_lease_id) == ("req-1", "sbx-1")
        assert str(termination.lease_id) == ids["lease"] and str(termination.run_id) == ids["run"]
        assert (stop.kind, stop.state, stop.schema) == (
            "stop_and_retain",
            "stopped",
            "paperclip.sandbox-stop-and-retain-receipt.v1",
        )
        assert stop.request_id  # defaults to the event id

    def test_intent_export_and_recovery_action(self, post_events):
        ids, events = graph()
        intent, export, action = uid(), uid(), uid()
        events += [
            event(
                "intent.upserted",
                {
                    "intent_id": intent,
                    "lease_id": ids["lease"],
                    "kind": "export_resume",
                    "state": "pending",
                },
            ),
            event(
                "export.upserted",
                {"export_id": export, "lease_id": ids["lease"], "state": "pending"},
            ),
            event(
                "recovery_action.upserted",
                {
                    "action_id": action,
                    "issue_id": ids["issue"],
                    "kind": "workspace_restore",
                    "status": "escalated",
                    "outcome": "awaiting retry",
                    "lease_id": ids["lease"],
                },
            ),
        ]
        assert post_events(events).status_code == 200
        assert m.LeaseIntent.objects.get(pk=intent).kind == "export_resume"
        assert m.LeaseIntent.objects.get(pk=intent).state == "pending"
        assert m.PendingExport.objects.get(pk=export).state == "pending"
        row = m.RecoveryAction.objects.get(pk=action)
        assert (row.kind, row.status, row.outcome) == (
            "workspace_restore",
            "escalated",
            "awaiting retry",
        )
        assert str(row.lease_id) == ids["lease"]
        assert row.evidence == {"leaseId": ids["lease"]}
        # a later upsert moves it on
        post_events(
            [
                event(
                    "intent.upserted",
                    {
                        "intent_id": intent,
                        "lease_id": ids["lease"],
                        "kind": "export_resume",
                        "state": "confirmed",
                    },
                ),
                event(
                    "recovery_action.upserted",
                    {
                        "action_id": action,
                        "issue_id": ids["issue"],
                        "kind": "workspace_restore",
                        "status": "resolved",
                    },
                ),
            ]
        )
        assert m.LeaseIntent.objects.get(pk=intent).state == "confirmed"
        assert m.RecoveryAction.objects.get(pk=action).status == "resolved"
        assert m.RecoveryAction.objects.get(pk=action).outcome == "awaiting retry"

    def test_lease_released(self, post_events):
        ids, events = graph(run_status="failed")
        events.append(
            event("lease.released", {"lease_id": ids["lease"], "disposition": "keep_running"})
        )
        assert post_events(events).status_code == 200
        lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
        # Recorded as sent (DOMAIN §2.5): the correction, not ingest, stops it.
        assert (lease.status, lease.disposition) == ("retained", "keep_running")


def test_an_upsert_keeps_fields_it_does_not_carry(post_events):
    ids, events = graph()
    post_events(events)
    post_events([event("issue.upserted", {"issue_id": ids["issue"], "status": "done"})])
    issue = m.Issue.objects.get(pk=ids["issue"])
    assert (issue.status, issue.key, str(issue.bound_workspace_id)) == (
        "done",
        "PAP-142",
        ids["ws"],
    )
    post_events(
        [
            event(
                "issue.upserted",
                {"issue_id": ids["issue"], "status": "done", "bound_workspace_id": None},
            )
        ]
    )
    assert m.Issue.objects.get(pk=ids["issue"]).bound_workspace_id is None


def test_out_of_order_rows_arrive_as_placeholders_and_are_filled_in(post_events):
    ids, events = graph()
    lease_first = [events[4]]  # the lease names an environment, issue, workspace and run
    assert post_events(lease_first).status_code == 200
    assert m.Environment.objects.get(pk=ids["env"]).placeholder
    run = m.HeartbeatRun.objects.get(pk=ids["run"])
    assert run.placeholder and run.status == "queued"  # a placeholder run counts as live
    assert m.Issue.objects.get(pk=ids["issue"]).placeholder
    assert post_events(events[:4]).status_code == 200
    assert not m.Environment.objects.get(pk=ids["env"]).placeholder
    assert m.HeartbeatRun.objects.get(pk=ids["run"]).status == "running"
    assert not m.EnvironmentLease.objects.get(pk=ids["lease"]).placeholder


def test_a_placeholder_environment_is_observe_only(post_events):
    ids, events = graph()
    post_events([events[4]])
    assert m.Environment.objects.get(pk=ids["env"]).retirement_mode == "observe"


def test_a_repeated_event_id_is_a_no_op(post_events):
    ids, events = graph()
    assert post_events(events).json() == {"accepted": 5, "duplicates": 0, "warnings": []}
    renamed = dict(events[1], data={**events[1]["data"], "title": "changed"})
    response = post_events([renamed, *events[2:]])
    assert response.json() == {"accepted": 0, "duplicates": 4, "warnings": []}
    assert m.Issue.objects.get(pk=ids["issue"]).title == "A task"
    assert m.IngestedEvent.objects.count() == 5


def test_event_ids_are_unique_per_token(post_events, db):
    _, events = graph()
    assert post_events(events).json()["accepted"] == 5
    _, other = m.ApiToken.issue("second-runtime", "ingest")
    assert post_events(events, token=other).json() == {
        "accepted": 5,
        "duplicates": 0,
        "warnings": [],
    }


def test_a_repeated_id_inside_one_batch_counts_once(post_events):
    _, events = graph()
    response = post_events([*events, events[0]])
    assert response.json() == {"accepted": 5, "duplicates": 1, "warnings": []}


def test_a_batch_with_one_bad_event_changes_nothing(post_events):
    _, events = graph()
    before = row_counts()
    events[3]["data"]["status"] = "exploded"
    response = post_events(events)
    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {"index": 3, "path": "data.status", "message": response.json()["errors"][0]["message"]}
        ]
    }
    assert "'queued'" in response.json()["errors"][0]["message"]
    assert row_counts() == before


def test_every_bad_field_is_named(post_events):
    ids, events = graph()
    events[0]["data"]["provider"] = "not a provider key"
    del events[4]["data"]["acquired_at"]
    events[4]["data"]["lease_id"] = "not-a-uuid"
    events[2]["occurred_at"] = "yesterday"
    events.append(
        {"id": "x", "type": "lease.exploded", "occurred_at": "2026-11-01T00:00:00Z", "data": {}}
    )
    response = post_events(events)
    assert response.status_code == 400
    named = {(e["index"], e["path"]) for e in response.json()["errors"]}
    assert named == {
        (0, "data.provider"),
        (4, "data.acquired_at"),
        (4, "data.lease_id"),
        (2, "occurred_at"),
        (5, "type"),
    }
    assert all(e["message"] for e in response.json()["errors"])
    assert m.Environment.objects.count() == 0


def test_a_termination_receipt_needs_its_state(post_events):
    ids, events = graph()
    events.append(
        event(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "run_id": ids["run"],
                "provider_lease_id": "sbx-1",
                "confirmed_at": "2026-11-01T03:00:00Z",
            },
        )
    )
    response = post_events(events)
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "data.state"
    assert m.EnvironmentLease.objects.count() == 0


@pytest.mark.parametrize("value", [1700000000, "2026-11-01T00:00:00", "2026-13-01T00:00:00Z"])
def test_timestamps_must_be_rfc3339_with_an_offset(post_events, value):
    _, events = graph()
    events[0]["occurred_at"] = value
    response = post_events(events)
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "occurred_at"


def test_releasing_an_unknown_lease_is_rejected(post_events):
    response = post_events([event("lease.released", {"lease_id": uid(), "disposition": "destroy"})])
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "data.lease_id"
    assert m.EnvironmentLease.objects.count() == 0


def test_a_bad_manifest_entry_names_its_path(post_events):
    ids, events = graph()
    events[2]["data"]["saved_manifest"] = {"src/a.py": {"sha256": "nothex", "size": -1}}
    errors = post_events(events).json()["errors"]
    assert {e["path"] for e in errors} == {
        "data.saved_manifest.src/a.py.sha256",
        "data.saved_manifest.src/a.py.size",
    }


class TestLimits:
    def test_more_than_1000_events_is_413(self, post_events):
        _, events = graph()
        many = [dict(events[0], id=f"e{i}") for i in range(1001)]
        response = post_events(many)
        assert response.status_code == 413
        assert m.Environment.objects.count() == 0

    def test_1000_events_is_fine(self, post_events):
        _, events = graph()
        many = [dict(events[0], id=f"e{i}") for i in range(1000)]
        assert post_events(many).json() == {"accepted": 1000, "duplicates": 0, "warnings": []}

    def test_more_than_5_mib_is_413(self, post_events):
        _, events = graph()
        events[1]["data"]["padding"] = "x" * (5 * 1024 * 1024)
        response = post_events(events)
        assert response.status_code == 413
        assert m.Environment.objects.count() == 0

    @pytest.mark.parametrize(
        "content_type",
        ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
    )
    def test_a_non_json_content_type_is_415(self, post_events, content_type):
        _, events = graph()
        response = post_events(
            events, content_type=content_type, body=json.dumps({"events": events})
        )
        assert response.status_code == 415

    @pytest.mark.parametrize("body", ["{", "[]", '{"events": {}}', '"events"', "null"])
    def test_a_body_that_is_not_a_batch_is_400(self, post_events, body):
        response = post_events([], body=body)
        assert response.status_code == 400
        assert response.json()["errors"][0]["path"] in ("(body)", "events")


class TestAuthentication:
    def test_a_missing_token_is_401(self, post_events):
        _, events = graph()
        response = post_events(events, token=None)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert m.Environment.objects.count() == 0

    def test_a_wrong_token_is_401(self, post_events):
        _, events = graph()
        assert post_events(events, token="pcc_" + uuid.uuid4().hex).status_code == 401

    def test_a_revoked_token_is_401(self, post_events, ingest_token):
        from django.utils import timezone

        row, raw = ingest_token
        m.ApiToken.objects.filter(pk=row.pk).update(revoked_at=timezone.now())
        _, events = graph()
        assert post_events(events, token=raw).status_code == 401

    def test_an_operator_token_is_403(self, post_events, operator_token):
        _, raw = operator_token
        _, events = graph()
        response = post_events(events, token=raw)
        assert response.status_code == 403
        assert m.Environment.objects.count() == 0

    def test_only_the_hash_is_stored(self, ingest_token):
        row, raw = ingest_token
        assert raw not in (row.token_hash, row.prefix)
        assert len(row.token_hash) == 64
        assert m.ApiToken.authenticate(raw) == row

    def test_csrf_is_not_needed_for_bearer_clients(self, ingest_token):
        from django.test import Client

        _, raw = ingest_token
        _, events = graph()
        response = Client(enforce_csrf_checks=True).post(
            "/api/v1/events",
            json.dumps({"events": events}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        assert response.status_code == 200


@pytest.mark.parametrize("bad", ["sbx\x00-1", "sbx-\ud800"])
def test_text_postgres_cannot_store_is_a_400_naming_the_field(post_events, bad):
    _, events = graph()
    events[4]["data"]["provider_lease_id"] = bad
    events[1]["data"]["title\x00"] = "x"
    response = post_events([], body=json.dumps({"events": events}))
    assert response.status_code == 400
    named = {(e["index"], e["path"]) for e in response.json()["errors"]}
    assert named == {(4, "data.provider_lease_id"), (1, "data.title\x00")}
    assert m.Environment.objects.count() == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (rb'{"a": "x\u0000"}', True),
        (rb'{"a": "\uD800"}', True),
        (rb'{"a": "\udfff"}', True),
        (rb'{"a": "\u00e9 caf\u00e9"}', False),
        (b'{"a": "plain"}', False),
    ],
)
def test_the_fast_path_sees_every_escape_postgres_cannot_store(raw, expected):
    from sandboxes.ingest.schemas import may_hold_unstorable_text

    assert may_hold_unstorable_text(raw) is expected
