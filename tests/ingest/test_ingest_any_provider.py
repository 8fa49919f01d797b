"""Ingest takes leases of every provider (DOMAIN §1: Paperclip's own key,
`daytona`, `local`, `ssh`, `e2b`, a plugin key…; paperclipai/paperclip
environment_leases.provider is free text), and an SSH sandbox's id is a URL
(`ssh://host/path`). A sandbox id is one path segment only where the console
puts it in a URL path or a directory name itself: for the providers it drives
(Daytona, local). Everywhere, a '.' or '..' segment is refused (issue 13 item 6)."""

import json

import pytest

from devtools.events import event, graph
from sandboxes import models as m

pytestmark = pytest.mark.django_db

SSH_ID = "ssh://build-7.internal/srv/paperclip/PAP-142"


@pytest.fixture
def post(client, ingest_token):
    _, raw = ingest_token

    def post(events):
        return client.post(
            "/api/v1/events",
            json.dumps({"events": events}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw}",
        )

    return post


def test_an_ssh_lease_and_its_receipt_are_ingested(post):
    ids, events = graph(provider="ssh", sandbox=SSH_ID, lease_status="released")
    events.append(
        event(
            "receipt.recorded",
            {
                "lease_id": ids["lease"],
                "kind": "termination",
                "state": "stopped",
                "run_id": ids["run"],
                "provider_lease_id": SSH_ID,
                "confirmed_at": "2026-11-01T03:00:00Z",
            },
            at="2026-11-01T03:00:00Z",
        )
    )
    response = post(events)
    assert response.status_code == 200, response.content
    lease = m.EnvironmentLease.objects.get(pk=ids["lease"])
    assert (lease.provider, lease.provider_lease_id) == ("ssh", SSH_ID)
    assert lease.receipts.get().provider_lease_id == SSH_ID
    assert m.Environment.objects.get(pk=ids["env"]).provider == "ssh"


@pytest.mark.parametrize("provider", ["e2b", "fake", "plugin:acme.sandbox"])
def test_any_provider_key_is_taken(post, provider):
    ids, events = graph(provider=provider, sandbox="box-1")
    assert post(events).status_code == 200
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).provider == provider


@pytest.mark.parametrize("provider", ["daytona", "local"])
def test_a_sandbox_the_console_drives_is_still_one_segment(post, provider):
    _, events = graph(provider=provider, sandbox=SSH_ID)
    response = post(events)
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} == {"data.provider_lease_id"}


@pytest.mark.parametrize("bad", ["ssh://host/../etc", "ssh://host/./x", "..", "."])
def test_dot_segments_are_refused_for_every_provider(post, bad):
    _, events = graph(provider="ssh", sandbox=bad)
    response = post(events)
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} == {"data.provider_lease_id"}


@pytest.mark.parametrize("bad", ["", "has space", "-leading", "x" * 65])
def test_a_provider_key_is_a_key(post, bad):
    _, events = graph(provider=bad)
    response = post(events)
    assert response.status_code == 400
    assert (0, "data.provider") in {(e["index"], e["path"]) for e in response.json()["errors"]}


@pytest.mark.parametrize("cwd", ["/app", "/srv/paperclip/PAP-142", "/", "workspace"])
def test_an_ssh_lease_keeps_any_working_directory_paperclip_gives_it(post, cwd):
    """Paperclip's SSH environments run in any directory of the host: its
    parseSshRemoteExecutionSpec takes any non-empty `remoteCwd`
    (paperclipai/paperclip: packages/adapter-utils/src/ssh.ts), and the console
    never touches an SSH sandbox's files. The `/home/<user>` rule for the
    roots the console hashes and exports refused the whole batch. Fails before
    the fix: 400 naming data.metadata.remoteCwd."""
    ids, events = graph(provider="ssh", sandbox=SSH_ID)
    events[-1]["data"]["metadata"] = {"remoteCwd": cwd}
    response = post(events)
    assert response.status_code == 200, response.content
    assert m.EnvironmentLease.objects.get(pk=ids["lease"]).metadata == {"remoteCwd": cwd}


@pytest.mark.parametrize("cwd", ["/app/../etc", "..", ""])
def test_an_ssh_lease_still_refuses_a_dotdot_or_empty_working_directory(post, cwd):
    ids, events = graph(provider="ssh", sandbox=SSH_ID)
    events[-1]["data"]["metadata"] = {"remoteCwd": cwd}
    response = post(events)
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} == {"data.metadata.remoteCwd"}


def test_a_daytona_lease_keeps_the_home_rule(post):
    ids, events = graph(provider="daytona")
    events[-1]["data"]["metadata"] = {"remoteCwd": "/app"}
    response = post(events)
    assert response.status_code == 400
    assert {e["path"] for e in response.json()["errors"]} == {"data.metadata.remoteCwd"}
