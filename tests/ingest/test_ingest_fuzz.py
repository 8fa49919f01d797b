"""Property-based: malformed payloads never cause a 500 or a partial write."""

import copy
import json
from datetime import UTC, datetime

import pytest
from django.apps import apps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.events import event, graph, uid
from sandboxes import models as m
from sandboxes.ingest.schemas import EVENT_TYPES

pytestmark = pytest.mark.django_db

MIRRORED = [
    model for model in apps.get_app_config("sandboxes").get_models() if model not in (m.ApiToken,)
]

# Required fields by kind of value, per event type (DOMAIN §4.1).
UUIDS = {
    "environment_id",
    "issue_id",
    "workspace_id",
    "run_id",
    "lease_id",
    "intent_id",
    "export_id",
    "action_id",
}
ENUMS = {"status", "lease_policy", "save_state", "kind", "state", "disposition"}
TIMES = {"acquired_at", "confirmed_at"}
TEXTS = {"name", "provider_lease_id"}

bad_uuid = st.one_of(
    st.just("not-a-uuid"),
    st.integers(),
    st.none(),
    st.lists(st.integers()),
    st.text(max_size=20).filter(lambda s: len(s) != 36),
)
bad_enum = st.one_of(
    st.sampled_from(["bogus", "", "ACTIVE", "Running"]), st.integers(), st.none(), st.booleans()
)
# Any provider key is taken (DOMAIN §1: every provider is mirrored); a non-key is not.
bad_provider = st.one_of(
    st.sampled_from(["", "has space", "-x", "x" * 65]), st.integers(), st.none(), st.booleans()
)
bad_time = st.one_of(
    st.sampled_from(["yesterday", "2026-11-01T00:00:00", "2026-13-40T99:00:00Z", ""]),
    st.integers(),
    st.none(),
    st.floats(),
)
bad_text = st.one_of(st.just(""), st.text(min_size=201, max_size=260), st.integers(), st.none())
REQUIRED = {
    type_: {name for name, field in schema.model_fields.items() if field.is_required()}
    for type_, schema in EVENT_TYPES.items()
}
BAD = {
    **dict.fromkeys(UUIDS, bad_uuid),
    **dict.fromkeys(ENUMS, bad_enum),
    "provider": bad_provider,
    **dict.fromkeys(TIMES, bad_time),
    **dict.fromkeys(TEXTS, bad_text),
}


def valid_batch():
    ids, events = graph()
    events += [
        event("lease.released", {"lease_id": ids["lease"], "disposition": "stop_and_retain"}),
        event(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "state": "stopped",
                "run_id": ids["run"],
                "provider_lease_id": "sbx-1",
                "confirmed_at": "2026-11-01T03:00:00Z",
            },
        ),
        event(
            "intent.upserted",
            {"intent_id": uid(), "lease_id": ids["lease"], "kind": "restore", "state": "pending"},
        ),
        event(
            "export.upserted", {"export_id": uid(), "lease_id": ids["lease"], "state": "pending"}
        ),
        event(
            "recovery_action.upserted",
            {
                "action_id": uid(),
                "issue_id": ids["issue"],
                "kind": "workspace_restore",
                "status": "active",
            },
        ),
    ]
    return events


@st.composite
def malformed_batches(draw):
    events = valid_batch()
    index = draw(st.integers(0, len(events) - 1))
    target = events[index]
    how = draw(st.sampled_from(["field", "drop", "envelope", "shape"]))
    required = [f for f in target["data"] if f in BAD and f in REQUIRED[target["type"]]]
    if how == "field":
        field = draw(st.sampled_from(required))
        free_text = target["type"] == "recovery_action.upserted" and field == "kind"
        target["data"][field] = draw(bad_text if free_text else BAD[field])
    elif how == "drop":
        del target["data"][draw(st.sampled_from(required))]
    elif how == "envelope":
        key = draw(st.sampled_from(["id", "type", "occurred_at", "data"]))
        bad = {
            "id": st.one_of(st.just(""), st.integers(), st.none()),
            "type": st.one_of(st.text(max_size=20), st.integers(), st.none()),
            "occurred_at": bad_time,
            "data": st.one_of(st.lists(st.integers()), st.text(), st.integers(), st.none()),
        }
        if draw(st.booleans()):
            target[key] = draw(bad[key])
        else:
            del target[key]
    else:
        events[index] = draw(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.none())))
    return {"events": events}


random_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def counts():
    return [model.objects.count() for model in MIRRORED]


@pytest.fixture
def post(client, ingest_token):
    _, raw = ingest_token

    def post(body: str):
        return client.post(
            "/api/v1/events",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )

    return post


def test_the_unmutated_batch_is_valid(post):
    assert post(json.dumps({"events": valid_batch()})).status_code == 200


@settings(
    max_examples=450,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=malformed_batches())
def test_malformed_batches_are_refused_whole(post, payload):
    before = counts()
    response = post(json.dumps(copy.deepcopy(payload)))
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert errors and all({"index", "path", "message"} <= set(e) for e in errors)
    assert counts() == before


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=random_json)
def test_arbitrary_json_never_errors_or_writes(post, payload):
    before = counts()
    response = post(json.dumps(payload))
    if payload == {"events": []} or (isinstance(payload, dict) and payload.get("events") == []):
        assert response.status_code == 200
    else:
        assert response.status_code == 400, response.content
    assert counts() == before


# --- issue 13: over-long strings, nested JSON and future dates, for every field ---------


def _string_fields(events):
    """(event index, key) of every string value an event's data carries, and the
    envelope's id: every one has a length limit (the longest is 1,000)."""
    out = [(i, None) for i in range(len(events))]
    for i, e in enumerate(events):
        out += [(i, k) for k, v in e["data"].items() if isinstance(v, str)]
    return out


@st.composite
def over_long(draw):
    events = valid_batch()
    index, key = draw(st.sampled_from(_string_fields(events)))
    text = draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=5)) * 1001
    value = text[: draw(st.integers(1001, 5000))]
    if key is None:
        events[index]["id"] = value
        return {"events": events}, index, "id"
    events[index]["data"][key] = value
    return {"events": events}, index, f"data.{key}"


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=over_long())
def test_an_over_long_string_in_any_field_is_refused_naming_it(post, case):
    payload, index, path = case
    before = counts()
    response = post(json.dumps(payload))
    assert response.status_code == 400, response.content[:300]
    named = {(e["index"], e["path"]) for e in response.json()["errors"]}
    # An optional field's error path also names the union member (…id.uuid).
    assert any(i == index and (p == path or p.startswith(path + ".")) for i, p in named), named
    assert counts() == before


def _nest(depth: int, leaf, as_dict: bool):
    for _ in range(depth):
        leaf = {"k": leaf} if as_dict else [leaf]
    return leaf


@st.composite
def deeply_nested(draw):
    events = valid_batch()
    index = draw(st.integers(0, len(events) - 1))
    target = events[index]["data"]
    key = draw(st.sampled_from([*target, "metadata", "evidence", "extra"]))
    target[key] = _nest(
        draw(st.integers(64, 400)), draw(st.none() | st.text(max_size=3)), draw(st.booleans())
    )
    return {"events": events}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=deeply_nested())
def test_deeply_nested_json_in_any_field_is_a_400(post, payload):
    before = counts()
    response = post(json.dumps(payload))
    assert response.status_code == 400, response.content[:300]
    [error] = response.json()["errors"]
    assert "nested deeper than" in error["message"]
    assert counts() == before


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    index=st.integers(0, 9),
    when=st.datetimes(min_value=datetime(2027, 1, 1), max_value=datetime(9999, 12, 31)),
)
def test_a_future_dated_event_of_any_type_is_refused(post, index, when):
    events = valid_batch()
    events[index]["occurred_at"] = when.replace(tzinfo=UTC).isoformat()
    before = counts()
    response = post(json.dumps({"events": events}))
    assert response.status_code == 400
    assert (index, "occurred_at") in {(e["index"], e["path"]) for e in response.json()["errors"]}
    assert counts() == before
