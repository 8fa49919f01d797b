"""Console pages for a sandbox whose id is not one path segment: an SSH
sandbox's id is ssh://host/path (paperclipai/paperclip
environment_leases.provider_lease_id is free text). Pages address records by
the console's own id, so they show, search and attest such a sandbox."""

from urllib.parse import quote

import pytest
from django.urls import reverse

from tests.factories import RetirementFactory

pytestmark = pytest.mark.django_db

SSH_ID = "ssh://build-7.internal/srv/paperclip/PAP-142"


@pytest.fixture
def ssh_record(db):
    return RetirementFactory(lease__provider="ssh", lease__provider_lease_id=SSH_ID)


def test_the_list_finds_it_by_its_id_and_links_to_its_page(as_operator, ssh_record):
    response = as_operator.get(reverse("sandbox-list"), {"q": SSH_ID})
    assert response.status_code == 200
    body = response.content.decode()
    assert SSH_ID in body
    assert reverse("sandbox-detail", kwargs={"pk": ssh_record.pk}) in body


def test_its_page_shows_it(as_operator, ssh_record):
    response = as_operator.get(reverse("sandbox-detail", kwargs={"pk": ssh_record.pk}))
    assert response.status_code == 200
    assert SSH_ID in response.content.decode()


def test_the_api_link_for_it_round_trips(client, operator_token, ssh_record):
    _, raw = operator_token
    response = client.get(
        f"/api/v1/kept-sandboxes/{quote(SSH_ID, safe='')}", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.json()["sandbox_id"] == SSH_ID


@pytest.mark.parametrize("encode", [True, False], ids=["percent-encoded", "raw-slashes"])
def test_the_page_for_a_pasted_id_opens_it(as_operator, ssh_record, encode):
    path = quote(SSH_ID, safe="") if encode else SSH_ID
    response = as_operator.get(f"/sandboxes/{path}/", follow=True)
    assert response.status_code == 200
    assert SSH_ID in response.content.decode()
    assert reverse("sandbox-by-id", kwargs={"sandbox_id": SSH_ID}).startswith("/sandboxes/ssh:")
