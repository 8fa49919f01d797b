"""Paging cursors are the console's own; anything else is a 400 naming the
parameter (issue 13, item 7). Regression: a cursor decoding to the wrong type
(a list, a number for a date, null, a non-uuid id) reached the SQL and was a
500 on /sandboxes/, /audit/, /passes/, /approvals/ and the API."""

import base64
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxes.paging import encode_cursor
from tests.factories import RetirementFactory

from .conftest import FUZZ, client_for

pytestmark = pytest.mark.django_db

PAGES = {
    "/sandboxes/": "after",
    "/sandboxes/?sort=-attempts": "after",
    "/sandboxes/?sort=provider_lease_id": "after",
    "/audit/": "after",
    "/passes/": "after",
    "/approvals/": "after",
}
API = "/api/v1/kept-sandboxes"


def _cursor(data) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


UID = str(uuid.uuid4())
CRAFTED = [
    {"t": "raw", "v": [1, 2], "id": UID},
    {"t": "raw", "v": {"a": 1}, "id": UID},
    {"t": "raw", "v": None, "id": UID},
    {"t": "raw", "v": True, "id": UID},
    {"t": "dt", "v": 5, "id": UID},
    {"t": "dt", "v": "not a date", "id": UID},
    {"t": "dt", "v": "2026-11-01T00:00:00+00:00", "id": "not-a-uuid"},
    {"t": "dt", "v": "2026-11-01T00:00:00+00:00", "id": [UID]},
    {"t": "raw", "v": 10**30, "id": UID},
    {"t": "raw", "v": "x\x00", "id": UID},
    {"t": "raw", "v": "abc", "id": UID},
    [1, 2, 3],
    "just a string",
    b"\xff\xfe not json",
    b"[" * 5000,
]


def _get(url, value, param, auth=None):
    sep = "&" if "?" in url else "?"
    return client_for(auth).get(f"{url}{sep}{param}={value}")


@pytest.mark.parametrize("url", sorted(PAGES))
@pytest.mark.parametrize("data", CRAFTED, ids=range(len(CRAFTED)))
def test_a_crafted_cursor_is_a_400_naming_the_parameter(users, url, data):
    if url.endswith("provider_lease_id") and isinstance(data, dict) and data["v"] == "abc":
        pytest.skip("a string is a sandbox id: a position of that order")
    RetirementFactory()
    response = _get(url, _cursor(data), PAGES[url], users["admin"])
    assert response.status_code == 400, response.content[:300]
    assert b"'after'" in response.content


@pytest.mark.parametrize("data", CRAFTED, ids=range(len(CRAFTED)))
def test_the_api_answers_a_crafted_cursor_with_a_400_naming_it(operator_token, data):
    _, raw = operator_token
    response = client_for().get(API, {"cursor": _cursor(data)}, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 400
    assert response.json()["field"] == "cursor"


def test_a_cursor_it_issued_still_pages(users):
    rows = [RetirementFactory() for _ in range(3)]
    newest = max(rows, key=lambda r: (r.updated_at, r.pk))
    cursor = encode_cursor(newest.updated_at, newest.pk)
    assert _get("/sandboxes/", cursor, "after", users["admin"]).status_code == 200


@settings(FUZZ, max_examples=60)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=3), c, max_size=2),
        max_leaves=4,
    ),
    pk=st.one_of(st.text(max_size=40), st.integers(), st.none(), st.just(UID)),
    kind=st.sampled_from(["raw", "dt", None]),
    url=st.sampled_from(sorted(PAGES)),
)
def test_fuzzed_cursors_never_cause_a_500(users, value, pk, kind, url):
    response = _get(url, _cursor({"t": kind, "v": value, "id": pk}), "after", users["admin"])
    assert response.status_code in (200, 400)
