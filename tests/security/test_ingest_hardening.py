"""Ingest against a hostile runtime (issue 13, items 1, 6, 7, 8; DOMAIN §4.1):
policy stays the console's, ids are one path segment, roots stay under the
sandbox home, future-dated events are refused, deep JSON and over-long fields
are a 400 naming the field, never a 500."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from devtools.events import event, graph, uid
from sandboxes import models as m

from .conftest import snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def post(client, ingest_token):
    _, raw = ingest_token

    def post(events=None, *, body=None):
        return client.post(
            "/api/v1/events",
            body if body is not None else json.dumps({"events": events}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )

    return post


def _paths(response) -> set[str]:
    return {e["path"] for e in response.json()["errors"]}


# --- item 1: policy belongs to the console ---------------------------------------


def _env_event(env_id, at="2026-11-01T01:00:00Z", **data):
    return event(
        "environment.upserted",
        {"environment_id": env_id, "name": "prod", "provider": "daytona", **data},
        at=at,
    )


HOSTILE = {
    "retirement_mode": "auto",
    "warm_retention_hours": 0,
    "max_retirements_per_pass": 10_000,
    "workspace_root": "home/daytona",
}


def test_an_ingest_token_cannot_switch_off_approval_of_an_existing_environment(post):
    env_id = uid()
    assert post([_env_event(env_id, at="2026-11-01T00:00:00Z")]).status_code == 200
    env = m.Environment.objects.get(pk=env_id)
    env.retirement_mode = "manual"  # an admin's choice
    env.save()
    before = env.policy()

    response = post([_env_event(env_id, name="prod-renamed", **HOSTILE)])

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] == 1
    assert {w["path"] for w in body["warnings"]} == {f"data.{k}" for k in HOSTILE}
    assert all(w["index"] == 0 and "ignored" in w["message"] for w in body["warnings"])
    env.refresh_from_db()
    assert env.policy() == before
    assert env.name == "prod-renamed"  # the rest of the row is still Paperclip's


def test_a_new_environment_takes_the_policy_it_carries(post):
    env_id = uid()
    response = post([_env_event(env_id, **HOSTILE)])
    assert response.json()["warnings"] == []
    env = m.Environment.objects.get(pk=env_id)
    assert env.retirement_mode == "auto" and env.max_retirements_per_pass == 10_000


def test_a_second_event_in_the_creating_batch_cannot_change_it_either(post):
    env_id = uid()
    response = post(
        [
            _env_event(env_id, at="2026-11-01T00:00:00Z", retirement_mode="manual"),
            _env_event(env_id, at="2026-11-01T00:01:00Z", retirement_mode="auto"),
        ]
    )
    assert [w["path"] for w in response.json()["warnings"]] == ["data.retirement_mode"]
    assert m.Environment.objects.get(pk=env_id).retirement_mode == "manual"


def test_an_environment_first_named_by_a_lease_takes_its_policy_once(post):
    """A placeholder (named by a lease before its own upsert) has no policy yet."""
    ids, events = graph()
    lease = events[-1]
    post([lease])
    response = post([_env_event(ids["env"], retirement_mode="manual")])
    assert response.json()["warnings"] == []
    assert m.Environment.objects.get(pk=ids["env"]).retirement_mode == "manual"


def test_sending_the_policy_the_console_holds_is_no_warning(post):
    env_id = uid()
    post([_env_event(env_id, at="2026-11-01T00:00:00Z")])
    response = post([_env_event(env_id, retirement_mode="observe", warm_retention_hours=24)])
    assert response.json()["warnings"] == []
    assert not m.AuditEvent.objects.exists()


# --- item 6: ids and roots from the runtime ---------------------------------------


@pytest.mark.parametrize("bad", [".", "..", "a/b", "../sandbox", "/", "sbx/.."])
def test_a_provider_id_is_one_path_segment(post, bad):
    ids, events = graph(sandbox=bad)
    response = post(events)
    assert response.status_code == 400
    assert _paths(response) == {"data.provider_lease_id"}
    assert not m.EnvironmentLease.objects.exists()


@pytest.mark.parametrize("bad", [".", "..", "x/y"])
def test_a_receipt_names_one_path_segment_too(post, bad):
    ids, events = graph()
    post(events)
    receipt = event(
        "receipt.recorded",
        {
            "lease_id": ids["lease"],
            "kind": "stop_and_retain",
            "run_id": ids["run"],
            "provider_lease_id": bad,
            "confirmed_at": "2026-11-01T03:00:00Z",
        },
    )
    response = post([receipt])
    assert response.status_code == 400
    assert _paths(response) == {"data.provider_lease_id"}


@pytest.mark.parametrize(
    "cwd", ["..", "../..", "work/../../etc", "/", "/etc", "/home", "/home/daytona", ".", ""]
)
def test_remote_cwd_is_checked_like_workspace_root(post, cwd):
    ids, events = graph()
    events[-1]["data"]["metadata"] = {"remoteCwd": cwd, "other": 1}
    response = post(events)
    assert response.status_code == 400, response.content
    assert _paths(response) == {"data.metadata.remoteCwd"}
    assert not m.EnvironmentLease.objects.exists()


@pytest.mark.parametrize("root", ["/", "..", "/etc", "a/../../b"])
def test_workspace_root_stays_under_the_home(post, root):
    response = post([_env_event(uid(), workspace_root=root)])
    assert response.status_code == 400
    assert _paths(response) == {"data.workspace_root"}


@pytest.mark.parametrize("cwd", ["workspace", "work/repo", "/home/daytona/workspace"])
def test_good_remote_cwds_are_kept_with_the_rest_of_the_metadata(post, cwd):
    ids, events = graph()
    events[-1]["data"]["metadata"] = {"remoteCwd": cwd, "nested": {"k": [1, 2]}}
    assert post(events).status_code == 200
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert lease.metadata == {"remoteCwd": cwd, "nested": {"k": [1, 2]}}


# --- item 8: future-dated events ---------------------------------------------------


def test_a_future_dated_event_is_refused_naming_occurred_at(post):
    ids, events = graph()
    post(events)
    issue_before = snapshot(m.Issue.objects.get(pk=ids["issue"]))
    frozen = event(
        "issue.upserted",
        {"issue_id": ids["issue"], "status": "done"},
        at="9999-12-31T23:59:59Z",
    )
    response = post([frozen])
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert (error["index"], error["path"]) == (0, "occurred_at")
    assert "ahead of the server's clock" in error["message"]
    assert snapshot(m.Issue.objects.get(pk=ids["issue"])) == issue_before
    # ...so a later, honest update still lands.
    later = event("issue.upserted", {"issue_id": ids["issue"], "status": "done"})
    later["occurred_at"] = timezone.now().isoformat()
    assert post([later]).status_code == 200
    assert m.Issue.objects.get(pk=ids["issue"]).status == "done"


def test_a_few_minutes_of_clock_skew_is_fine(post):
    ids, events = graph()
    soon = (timezone.now() + timedelta(minutes=4)).isoformat()
    for e in events:
        e["occurred_at"] = soon
    assert post(events).status_code == 200


def test_a_future_event_is_refused_with_the_other_bad_fields_of_its_batch(post):
    ids, events = graph()
    events[0]["occurred_at"] = "3000-01-01T00:00:00+00:00"
    events[1]["data"]["status"] = "bogus"
    response = post(events)
    assert {(e["index"], e["path"]) for e in response.json()["errors"]} == {
        (0, "occurred_at"),
        (1, "data.status"),
    }


# --- item 7: deep JSON and column lengths ------------------------------------------


@pytest.mark.parametrize("depth", [65, 5_000, 200_000])
def test_deeply_nested_json_is_a_400_naming_where(post, depth):
    ids, events = graph()
    body = json.dumps({"events": events})
    deep = "[" * depth + "]" * depth
    body = body.replace('"sbx-1"', f'"sbx-1", "metadata": {{"x": {deep}}}', 1)
    response = post(body=body)
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert "nested deeper than 64 levels" in error["message"]
    if depth < 1000:  # the parser itself gives up on the deepest ones
        assert error["path"].startswith("events[4].data.metadata.x")
    assert not m.Environment.objects.exists()


def test_metadata_nested_within_the_limit_is_kept(post):
    ids, events = graph()
    value: object = "leaf"
    for _ in range(50):
        value = {"k": value}
    events[-1]["data"]["metadata"] = {"deep": value}
    assert post(events).status_code == 200


def test_a_recovery_action_kind_longer_than_its_column_is_a_400(post):
    """Regression: 65-200 characters passed validation and PostgreSQL's refusal
    (varchar(64)) was a 500."""
    ids, events = graph()
    action = event(
        "recovery_action.upserted",
        {"action_id": uid(), "issue_id": ids["issue"], "kind": "k" * 65, "status": "active"},
    )
    response = post([*events, action])
    assert response.status_code == 400
    assert _paths(response) == {"data.kind"}
    ok = dict(action, id="again", data={**action["data"], "kind": "k" * 64})
    assert post([*events, ok]).status_code == 200
