"""Provider settings hardening (issue 13, item 9): an environment's
api_key_env may only name an allowlisted variable (never SECRET_KEY or a
database credential), the API URL must be https unless it is this machine,
"Ask the provider now" is audited, and an API token stops working — flagged
on the tokens page — when its creator loses the role that could mint it."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from sandboxes import models as m
from sandboxes.providers import reset_providers
from sandboxes.providers.registry import ProviderSettingsError, get_provider
from sandboxes.roles import ADMINS, OPERATORS
from tests import factories as f

from .conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_clients():
    reset_providers()
    yield
    reset_providers()


@pytest.mark.parametrize(
    "name",
    [
        "SECRET_KEY",
        "DATABASE_URL",
        "PAPERCLIP_DATABASE_URL",
        "REDIS_URL",
        "METRICS_TOKEN",
        "PGPASSWORD",
        "DJANGO_SECRET_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "lower_case",
        "A B",
    ],
)
def test_api_key_env_never_names_the_consoles_own_secrets(settings, name):
    # Even when someone lists it: these would travel as the Bearer token.
    settings.PROVIDER_API_KEY_VARIABLES = ["DAYTONA_API_KEY", name]
    with pytest.raises(ProviderSettingsError, match="api_key_env"):
        get_provider("daytona", api_url="https://daytona.example/api", api_key_env=name)


def test_api_key_env_must_be_allowlisted(settings):
    settings.PROVIDER_API_KEY_VARIABLES = ["DAYTONA_API_KEY"]
    with pytest.raises(ProviderSettingsError, match="PROVIDER_API_KEY_VARIABLES"):
        get_provider("daytona", api_url="https://d.example/api", api_key_env="HOME")
    settings.PROVIDER_API_KEY_VARIABLES = ["DAYTONA_API_KEY", "DAYTONA_EU_KEY"]
    assert get_provider("daytona", api_url="https://d.example/api", api_key_env="DAYTONA_EU_KEY")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://app.daytona.io/api", True),
        ("http://127.0.0.1:3986", True),
        ("http://localhost:3986", True),
        ("http://[::1]:3986", True),
        ("http://app.daytona.io/api", False),
        ("http://10.0.0.5/api", False),
        ("ftp://app.daytona.io", False),
        ("app.daytona.io", False),
    ],
)
def test_a_non_loopback_api_url_must_be_https(url, ok):
    if ok:
        assert get_provider("daytona", api_url=url)
    else:
        with pytest.raises(ProviderSettingsError, match="https"):
            get_provider("daytona", api_url=url)


def test_the_reconciler_records_refused_settings_on_the_retirement(settings):
    """Through the environment's settings: the refusal is the record's error,
    no provider call is made."""
    from sandboxes.reconciler.passes import run_pass

    env = f.EnvironmentFactory(
        provider="daytona",
        api_url="https://attacker.example/api",
        api_key_env="SECRET_KEY",
        retirement_mode="auto",
    )
    lease = f.EnvironmentLeaseFactory(
        environment=env, provider="daytona", status=m.LeaseStatus.FAILED
    )
    f.stop_receipt(lease)
    run_pass(worker="t")
    r = m.Retirement.objects.filter(provider_lease_id=lease.provider_lease_id).first()
    assert r is not None and "api_key_env" in r.last_error


def test_asking_the_provider_now_is_audited(users, settings, tmp_path):
    settings.LOCAL_SANDBOX_ROOT = tmp_path
    r = f.RetirementFactory(stage=m.Stage.AWAITING_APPROVAL)
    response = client_for(users["reviewer"]).post(
        reverse("sandbox-provider-state", kwargs={"pk": r.pk})
    )
    assert response.status_code == 200
    row = m.AuditEvent.objects.get(action="retirement.ask_provider")
    assert row.actor == users["reviewer"] and row.object_id == str(r.pk)
    assert row.sandbox_id == r.provider_lease_id
    assert set(row.after) == {"provider_state", "error"}


# --- tokens whose creator lost the role ------------------------------------------------


def _api(raw):
    return client_for().get("/api/v1/kept-sandboxes", HTTP_AUTHORIZATION=f"Bearer {raw}")


def _mint(users):
    response = client_for(users["admin"]).post(
        reverse("token-create"), {"name": "cron", "scope": "operator", "reason": "x"}
    )
    return response.context["raw"]


def test_a_token_stops_working_when_its_creator_is_no_longer_an_admin(users):
    raw = _mint(users)
    assert _api(raw).status_code == 200
    admin = users["admin"]
    admin.groups.remove(Group.objects.get(name=ADMINS))
    admin.groups.add(Group.objects.get(name=OPERATORS))  # still in the console, not an admin
    assert _api(raw).status_code == 401
    # ...and the tokens page says why.
    other_admin = f.UserFactory(username="second-admin", groups=[ADMINS])
    page = client_for(other_admin).get(reverse("tokens")).content.decode()
    assert "suspended: its creator admin-sec may no longer manage tokens" in page
    # Given the role back, the token works again (nobody revoked it).
    admin.groups.add(Group.objects.get(name=ADMINS))
    assert _api(raw).status_code == 200


def test_a_token_stops_working_when_its_creator_is_deactivated(users):
    raw = _mint(users)
    users["admin"].is_active = False
    users["admin"].save()
    assert _api(raw).status_code == 401


def test_deleting_the_creator_revokes_their_tokens(db):
    creator = f.UserFactory(username="leaver", groups=[ADMINS])
    token, raw = m.ApiToken.issue("cron", "operator", created_by=creator)
    creator.delete()
    token.refresh_from_db()
    assert token.revoked_at is not None and _api(raw).status_code == 401


def test_a_token_made_by_the_command_has_no_creator_and_keeps_working(operator_token):
    _, raw = operator_token
    assert _api(raw).status_code == 200
