"""Property-based: the act API (any action, sandbox id and body) and ingest
(NUL in otherwise valid text) never answer 500 and never write part of a change.
tests/ingest/test_ingest_fuzz.py fuzzes ingest's schema; this adds the text
PostgreSQL cannot store."""

import json
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.events import graph
from sandboxes.models import AuditEvent

from .conftest import FUZZ, changes, client_for, rolled_back, snapshot
from .endpoints import API_ACTIONS

pytestmark = pytest.mark.django_db

weird_text = st.one_of(
    st.text(max_size=30),  # any code point, lone surrogates included: JSON can carry them
    st.sampled_from(["", " ", "\x00", "ok\x00", "\ud800", "x" * 2001, "x" * 2000, "reason"]),
)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | weird_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(weird_text, children, max_size=3)
    ),
    max_leaves=8,
)
bodies = st.one_of(
    st.builds(lambda r: json.dumps({"reason": r}), weird_text),
    st.builds(
        lambda r, extra: json.dumps({"reason": r, **extra}),
        weird_text,
        st.dictionaries(weird_text, json_value, max_size=2),
    ),
    st.builds(json.dumps, json_value),
    st.binary(max_size=40),
    st.sampled_from(["", "{", "null", "[]", '{"reason": 1}', '{"reason": ["x"]}']),
    # Issue 13: nested deeper than the parser or the console allows, and reasons
    # around the 2,000-character limit.
    st.builds(
        lambda depth, open_, close: '{"reason": "x", "n": ' + open_ * depth + close * depth + "}",
        st.integers(60, 20_000),
        st.sampled_from(["[", '{"a":']),
        st.sampled_from(["]", "}"]),
    ),
    st.builds(lambda n: json.dumps({"reason": "r" * n}), st.integers(1_990, 2_100)),
)


@st.composite
def requests(draw, world):
    action = draw(st.one_of(st.sampled_from(list(API_ACTIONS)), weird_text.filter(bool)))
    sandbox = draw(
        st.one_of(
            st.sampled_from([world["awaiting"].provider_lease_id, world["held"].provider_lease_id]),
            weird_text.filter(bool),
        )
    )
    content_type = draw(
        st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"])
    )
    return action, sandbox, draw(bodies), content_type


def _quote(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_no_act_request_causes_a_500_or_a_partial_write(world, operator_token, data):
    _, raw = operator_token
    action, sandbox, body, content_type = data.draw(requests(world), label="request")
    client = client_for()
    rows = [world["awaiting"], world["held"]]
    with rolled_back():
        before = snapshot(*rows)
        response = client.post(
            f"/api/v1/kept-sandboxes/{_quote(sandbox)}/{_quote(action)}",
            body,
            content_type=content_type,
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        # 405: an action named "/" turns the path into the read-only detail
        # route of a slash-carrying sandbox id (ssh://... ids are addressable),
        # which refuses POST with its Allow header; still no write, no 500.
        assert response.status_code in (200, 400, 404, 405, 409), response.content[:300]
        if response.status_code == 405:
            assert response["Allow"] == "GET"
        diff = changes(before, snapshot(*rows))
        audits = diff["counts"].pop("sandboxes.AuditEvent", 0)
        if response.status_code != 200:
            assert audits == 0 and diff["counts"] == {}, diff
            assert all(not v for k, v in diff.items() if k != "counts"), diff
            return
        assert audits == 1
        assert set(diff["counts"]) <= {"sandboxes.Receipt"}
        (event,) = AuditEvent.objects.all()
        assert event.action == "retirement." + action.replace("-", "_")


@pytest.mark.parametrize(
    ("sandbox", "reason"),
    [("{awaiting}", "ok\x00"), ("{awaiting}", "\ud800"), ("sbx\x00", "ok")],
    ids=["nul-reason", "surrogate-reason", "nul-sandbox-id"],
)
@pytest.mark.parametrize("action", API_ACTIONS)
def test_text_postgresql_cannot_store_is_refused_not_a_500(
    world, operator_token, action, sandbox, reason
):
    """Regression: these reached INSERT/SELECT and PostgreSQL's refusal was a 500."""
    _, raw = operator_token
    target = world["held"] if action == "release-hold" else world["awaiting"]
    sandbox = sandbox.format(awaiting=target.provider_lease_id)
    before = snapshot(target)
    response = client_for().post(
        f"/api/v1/kept-sandboxes/{_quote(sandbox)}/{action}",
        json.dumps({"reason": reason}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code in (404, 409)
    assert snapshot(target) == before


def test_reads_refuse_nul_too(world, operator_token):
    _, raw = operator_token
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    client = client_for()
    assert client.get("/api/v1/kept-sandboxes/sbx%00", **auth).status_code == 404
    response = client.get("/api/v1/kept-sandboxes", {"environment": "e\x00"}, **auth)
    assert response.status_code == 400


# --- ingest -----------------------------------------------------------------------------


@st.composite
def batches_with_nul(draw):
    _, events = graph()
    event = draw(st.sampled_from(events))
    where = draw(st.sampled_from(["value", "key", "id", "metadata"]))
    poison = draw(st.text(max_size=5)) + "\x00" + draw(st.text(max_size=5))
    if where == "value":
        key = draw(
            st.sampled_from(sorted(k for k, v in event["data"].items() if isinstance(v, str)))
        )
        event["data"][key] = poison
    elif where == "key":
        event["data"][poison] = "x"
    elif where == "id":
        event["id"] = poison
    else:
        events[-1]["data"]["metadata"] = draw(
            st.sampled_from([{"remoteCwd": poison}, {poison: 1}, {"nested": [poison]}])
        )
    return events


@settings(FUZZ, max_examples=100)
@given(events=batches_with_nul())
def test_ingest_refuses_nul_whole_batch(ingest_token, events):
    _, raw = ingest_token
    client = client_for()
    with rolled_back():
        before = snapshot()
        response = client.post(
            "/api/v1/events",
            json.dumps({"events": events}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )
        assert response.status_code == 400, response.content[:300]
        errors = response.json()["errors"]
        assert errors and all({"index", "path", "message"} <= set(e) for e in errors)
        assert snapshot() == before


# --- issue 13: wrong-type cursors on the read API -----------------------------------------


@settings(FUZZ, max_examples=80)
@given(
    value=json_value,
    pk=st.one_of(weird_text, st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
    kind=st.sampled_from(["raw", "dt", None, 1]),
    junk=st.one_of(st.none(), st.binary(max_size=30)),
)
def test_no_cursor_causes_a_500(world, operator_token, value, pk, kind, junk):
    import base64

    _, raw = operator_token
    data = junk if junk is not None else json.dumps({"t": kind, "v": value, "id": pk}).encode()
    cursor = base64.urlsafe_b64encode(data).decode().rstrip("=")
    response = client_for().get(
        "/api/v1/kept-sandboxes", {"cursor": cursor}, HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code in (200, 400), response.content[:300]
    if response.status_code == 400:
        assert response.json()["field"] == "cursor"
