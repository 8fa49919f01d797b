"""The URLconf against the registry, and the HTTP methods each kind of URL takes."""

import pytest
from django.urls import reverse

from sandboxes.api.kept_sandboxes import ACTIONS as API_ACTION_FUNCTIONS

from .conftest import client_for, snapshot
from .endpoints import ACTIONS, API_ACTIONS, PAGES, classified, page_url, url_names

pytestmark = pytest.mark.django_db


def test_every_url_in_the_urlconf_is_classified():
    """A new URL must be added to tests/security/endpoints.py, with its roles if it acts."""
    assert url_names() - classified() == set(), "unclassified URLs: add them to endpoints.py"
    assert classified() - url_names() == set(), "the registry names URLs that no longer exist"


def test_every_act_api_action_is_a_console_action_too():
    assert set(API_ACTION_FUNCTIONS) == set(API_ACTIONS)
    assert set(API_ACTIONS.values()) <= {a.name for a in ACTIONS}


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
@pytest.mark.parametrize("method", ["get", "head", "put", "patch", "delete", "options"])
def test_every_action_rejects_every_method_but_post(users, world, action, method):
    client = client_for(users["admin"])
    before = snapshot(*filter(None, [action.row(world)]))
    response = getattr(client, method)(action.url(world))
    assert response.status_code == 405, (method, action.name)
    assert response["Allow"] == "POST"
    assert snapshot(*filter(None, [action.row(world)])) == before


@pytest.mark.parametrize(("name", "target"), PAGES.items())
def test_every_page_rejects_post(users, world, name, target):
    url = page_url(name, world)
    before = snapshot()
    response = client_for(users["admin"]).post(url, {"reason": "x"})
    assert response.status_code == 405, name
    assert snapshot() == before


@pytest.mark.parametrize(("name", "target"), PAGES.items())
def test_every_page_sends_anonymous_visitors_to_login(client, world, name, target):
    response = client.get(page_url(name, world))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_logout_is_a_post(users):
    client = client_for(users["operator"])
    assert client.get(reverse("logout")).status_code == 405
    assert client.get(reverse("dashboard")).status_code == 200


def test_the_api_rejects_get_on_its_posts(operator_token, ingest_token, world):
    _, op = operator_token
    _, ing = ingest_token
    client = client_for()
    sid = world["awaiting"].provider_lease_id
    for action in API_ACTIONS:
        url = f"/api/v1/kept-sandboxes/{sid}/{action}"
        assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {op}").status_code == 405
        assert client.put(url, HTTP_AUTHORIZATION=f"Bearer {op}").status_code == 405
    assert client.get("/api/v1/events", HTTP_AUTHORIZATION=f"Bearer {ing}").status_code == 405
    assert (
        client.post("/api/v1/kept-sandboxes", HTTP_AUTHORIZATION=f"Bearer {op}").status_code == 405
    )
