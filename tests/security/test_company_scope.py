"""The role × action matrix, for users limited to another company (README,
company scope): every page and API endpoint naming a record of another company
answers 404 and its body names neither the sandbox nor the task; lists,
searches, exports and counts omit it; an action on it changes nothing."""

import json

import pytest
from django.urls import reverse

from sandboxes import actions, token_actions
from sandboxes.models import ApiToken, AuditEvent
from sandboxes.models.choices import Stage
from tests.console.conftest import clean_compare
from tests.factories import (
    AttachmentFactory,
    CompanyFactory,
    RetirementFactory,
    UserFactory,
    hold_until,
    limit_to,
    move_to_company,
)

from .conftest import ROLES, client_for, snapshot
from .endpoints import (
    ACTIONS,
    API_ACTIONS,
    COMPANY_ACTIONS_403,
    COMPANY_ACTIONS_BULK,
    COMPANY_ACTIONS_UNSCOPED,
    COMPANY_PAGES_404,
    COMPANY_PAGES_FLEET,
    PAGE_ROLES,
    PAGES,
    READERS,
    page_url,
)

pytestmark = pytest.mark.django_db

LIMITED_ROLES = ["reviewer", "operator", "admin"]


@pytest.fixture
def companies(db):
    return {"ours": CompanyFactory(name="Ours Inc"), "theirs": CompanyFactory(name="Theirs Ltd")}


@pytest.fixture
def scoped(world, companies):
    """The security world, all of it in the other company; one record of our own."""
    theirs = companies["theirs"]
    move_to_company(theirs, world["awaiting"], world["held"])
    world["environment"].company_id = theirs.pk
    world["environment"].save(update_fields=["company_id"])
    world["task"].title = "Secret merger of Theirs Ltd"
    world["task"].save(update_fields=["title"])
    ours = RetirementFactory(stage=Stage.AWAITING_APPROVAL)
    clean_compare(ours)
    move_to_company(companies["ours"], ours)
    world["ours"] = ours
    return world


@pytest.fixture
def limited(db, companies):
    """A user of each role limited to our company."""
    return {
        role: limit_to(UserFactory(username=f"{role}-ours", groups=groups), companies["ours"])
        for role, groups in ROLES.items()
        if role != "outsider"
    }


def _secrets(world) -> list[str]:
    """What must never appear in an answer to a user of another company."""
    return [
        world["awaiting"].provider_lease_id,
        world["held"].provider_lease_id,
        world["task"].title,
        world["task"].key,
    ]


def _body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


def _assert_no_leak(response, world) -> str:
    """The body (read once: a streamed export can be read only once), checked."""
    body = _body(response)
    for secret in _secrets(world):
        assert secret not in body, secret
    return body


# --- the registry -------------------------------------------------------------------


def test_every_page_and_action_says_how_company_scope_applies():
    targeted = {name for name, target in PAGES.items() if target is not None}
    assert targeted == COMPANY_PAGES_404 | COMPANY_PAGES_FLEET
    for action in ACTIONS:
        names_object = (action.url_target or action.target) is not None
        known = COMPANY_ACTIONS_BULK | COMPANY_ACTIONS_UNSCOPED
        assert names_object != (action.name in known), action.name
    assert {a.name for a in ACTIONS} - known >= COMPANY_ACTIONS_403


# --- pages ----------------------------------------------------------------------------


def _company_page_url(name, world):
    if name == "attachment":
        att = AttachmentFactory(issue=world["task"], path="notes/secret.txt")
        return reverse(name, kwargs={"pk": att.pk})
    return page_url(name, world)


@pytest.mark.parametrize("role", LIMITED_ROLES)
@pytest.mark.parametrize("name", sorted(COMPANY_PAGES_404))
def test_a_page_of_another_companys_record_is_404(scoped, limited, name, role, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    response = client_for(limited[role]).get(_company_page_url(name, scoped))
    assert response.status_code == 404, (role, name)
    _assert_no_leak(response, scoped)


@pytest.mark.parametrize("name", sorted(COMPANY_PAGES_404 - {"attachment"}))
def test_an_unlimited_user_still_reads_it(scoped, users, name):
    response = client_for(users["reviewer"]).get(_company_page_url(name, scoped))
    assert response.status_code in (200, 302), name


@pytest.mark.parametrize("role", LIMITED_ROLES)
@pytest.mark.parametrize("name", sorted(n for n, t in PAGES.items() if t is None) + ["pass-detail"])
def test_lists_counts_and_exports_omit_another_company(scoped, limited, users, name, role):
    # An unlimited admin acts on their record, so the audit trail has rows of both.
    actions.hold(scoped["awaiting"].pk, actor=users["admin"], reason="theirs", until=hold_until())
    actions.retry(scoped["ours"].pk, actor=users["admin"], reason="ours")
    response = client_for(limited[role]).get(page_url(name, scoped))
    allowed = role in PAGE_ROLES.get(name, READERS)
    assert response.status_code == (200 if allowed else 403), (role, name)
    body = _assert_no_leak(response, scoped)
    if name in ("sandbox-list", "audit", "audit-export-csv", "audit-export-json", "dashboard"):
        assert scoped["ours"].provider_lease_id in body, name


@pytest.mark.parametrize(
    "query",
    [
        {"stage": "all"},
        {"stage": "all", "q": "{theirs}"},
        {"stage": "all", "company": "{theirs_company}"},
    ],
)
def test_the_list_shows_only_their_company(scoped, limited, companies, query):
    values = {
        "theirs": scoped["awaiting"].provider_lease_id,
        "theirs_company": str(companies["theirs"].pk),
    }
    params = {k: v.format(**values) for k, v in query.items()}
    response = client_for(limited["operator"]).get(reverse("sandbox-list"), params)
    assert response.status_code == 200
    body = response.content.decode()
    if "q" not in params:  # a search shows what was typed back in its box
        _assert_no_leak(response, scoped)
    assert f'data-sandbox="{values["theirs"]}"' not in body
    assert scoped["task"].title not in body
    rows = body.count('data-company="')
    if "q" not in params:
        # Another company is not one of the filter's choices: the filter is
        # refused and the list is the user's own, as unfiltered.
        assert rows == 1 and scoped["ours"].provider_lease_id in body
    else:
        assert rows == 0


def test_the_company_filter_and_column(scoped, users, companies):
    client = client_for(users["reviewer"])
    page = client.get(reverse("sandbox-list"), {"company": str(companies["ours"].pk)})
    body = page.content.decode()
    assert page.status_code == 200
    assert f'data-company="{companies["ours"].pk}"' in body and "Ours Inc" in body
    assert scoped["awaiting"].provider_lease_id not in body
    everything = client.get(reverse("sandbox-list")).content.decode()
    assert "Theirs Ltd" in everything and "Ours Inc" in everything
    detail = client.get(reverse("sandbox-detail", kwargs={"pk": scoped["ours"].pk}))
    assert "Ours Inc" in detail.content.decode()


def test_the_audit_export_names_the_company(scoped, users, companies):
    actions.retry(scoped["ours"].pk, actor=users["admin"], reason="ours")
    rows = json.loads(_body(client_for(users["reviewer"]).get(reverse("audit-export-json"))))
    (row,) = rows
    assert row["company_id"] == str(companies["ours"].pk) and row["company"] == "Ours Inc"
    csv = _body(client_for(users["reviewer"]).get(reverse("audit-export-csv")))
    assert csv.splitlines()[0].split(",")[5:7] == ["sandbox_id", "company"]


# --- actions --------------------------------------------------------------------------

SCOPED_ACTIONS = [
    a for a in ACTIONS if a.name not in COMPANY_ACTIONS_UNSCOPED | COMPANY_ACTIONS_BULK
]


@pytest.mark.parametrize("role", LIMITED_ROLES)
@pytest.mark.parametrize("action", SCOPED_ACTIONS, ids=lambda a: a.name)
def test_an_action_on_another_companys_object_is_404_and_changes_nothing(
    scoped, limited, action, role
):
    row = action.row(scoped)
    before = snapshot(*filter(None, [row]))
    response = client_for(limited[role]).post(action.url(scoped), action.data(scoped))
    scoped_out = role in action.roles and action.name not in COMPANY_ACTIONS_403
    expected = 404 if scoped_out else 403
    assert response.status_code == expected, (role, action.name, response.content[:200])
    _assert_no_leak(response, scoped)
    assert snapshot(*filter(None, [row])) == before


@pytest.mark.parametrize("name", sorted(COMPANY_ACTIONS_BULK))
def test_a_bulk_action_refuses_another_companys_record_as_not_found(scoped, limited, name):
    action = next(a for a in ACTIONS if a.name == name)
    data = action.data(scoped)
    data["ids"] = [str(scoped["awaiting"].pk), str(scoped["ours"].pk)]
    before = snapshot(scoped["awaiting"])
    response = client_for(limited["operator"]).post(action.url(scoped), data, follow=True)
    assert (
        snapshot(scoped["awaiting"])[f"sandboxes.Retirement:{scoped['awaiting'].pk}"]
        == (before[f"sandboxes.Retirement:{scoped['awaiting'].pk}"])
    )
    body = response.content.decode()
    assert "No such kept sandbox" in body
    _assert_no_leak(response, scoped)
    # Their record is refused; ours is done, with one audit row.
    assert [e.object_id for e in AuditEvent.objects.all()] == [str(scoped["ours"].pk)]


def test_all_matching_takes_only_their_company(scoped, limited):
    response = client_for(limited["operator"]).post(
        reverse("sandbox-bulk"),
        {"action": "retry", "all_matching": "on", "reason": "all of them", "stage": "all"},
    )
    assert response.status_code == 302
    assert {e.object_id for e in AuditEvent.objects.all()} == {str(scoped["ours"].pk)}


def test_only_an_admin_of_every_company_sets_limits(scoped, limited, users, companies):
    member = scoped["member"]
    limit_to(member, companies["ours"])
    url = reverse("user-companies", kwargs={"pk": member.pk})
    data = {"companies": [str(companies["theirs"].pk)], "reason": "widen myself"}
    before = snapshot(member)
    assert client_for(limited["admin"]).post(url, data).status_code == 403
    assert client_for(users["operator"]).post(url, data).status_code == 403
    assert snapshot(member) == before


def test_a_limited_admin_adds_users_limited_to_their_companies(limited, companies):
    response = client_for(limited["admin"]).post(
        reverse("user-create"), {"username": "newbie", "role": "operator", "reason": "hire"}
    )
    assert response.status_code == 200
    newbie = type(limited["admin"]).objects.get(username="newbie")
    assert list(newbie.company_scopes.values_list("company_id", flat=True)) == [
        companies["ours"].pk
    ]


def test_a_limited_admin_cannot_mint_an_ingest_token(limited):
    response = client_for(limited["admin"]).post(
        reverse("token-create"), {"name": "feeder", "scope": "ingest", "reason": "x"}
    )
    assert response.status_code == 400
    assert "cannot create an ingest token" in response.content.decode()
    assert not ApiToken.objects.filter(name="feeder").exists()


# --- the API and /metrics -------------------------------------------------------------


@pytest.fixture
def limited_token(limited):
    """An operator token minted by an admin limited to our company."""
    _, raw = token_actions.create_token(actor=limited["admin"], name="ours-bot", scope="operator")
    return raw


def _get(raw, url, **params):
    return client_for().get(url, params, HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_the_api_list_omits_another_company(scoped, limited_token, companies):
    body = _get(limited_token, reverse("api-kept-sandboxes"), stage="all").json()
    assert [r["sandbox_id"] for r in body["results"]] == [scoped["ours"].provider_lease_id]
    assert body["results"][0]["company"] == {"id": str(companies["ours"].pk), "name": "Ours Inc"}
    theirs = _get(limited_token, reverse("api-kept-sandboxes"), company=str(companies["theirs"].pk))
    assert theirs.json()["results"] == []


def test_the_api_filters_by_company(scoped, operator_token, companies):
    _, raw = operator_token
    url = reverse("api-kept-sandboxes")
    body = _get(raw, url, stage="all", company=str(companies["theirs"].pk)).json()
    assert {r["sandbox_id"] for r in body["results"]} == {
        scoped["awaiting"].provider_lease_id,
        scoped["held"].provider_lease_id,
    }
    bad = _get(raw, url, company="acme")
    assert bad.status_code == 400 and "company" in bad.json()["error"]


@pytest.mark.parametrize("suffix", ["", "/salvage.zip"])
def test_the_api_reads_of_another_company_are_404(scoped, limited_token, suffix):
    from tests.factories import salvage_export

    salvage_export(scoped["awaiting"], {"notes/work.txt": b"unsaved\n"})
    sandbox = scoped["awaiting"].provider_lease_id
    response = _get(limited_token, f"/api/v1/kept-sandboxes/{sandbox}{suffix}")
    assert response.status_code == 404
    _assert_no_leak(response, scoped)


@pytest.mark.parametrize("action", API_ACTIONS)
def test_the_api_actions_on_another_company_are_404(scoped, limited_token, action):
    r = scoped["held"] if action == "release-hold" else scoped["awaiting"]
    before = snapshot(r)
    response = client_for().post(
        f"/api/v1/kept-sandboxes/{r.provider_lease_id}/{action}",
        json.dumps({"reason": "cross-company", "until": hold_until().isoformat()}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {limited_token}",
    )
    assert response.status_code == 404
    _assert_no_leak(response, scoped)
    assert snapshot(r) == before


def test_a_token_limited_on_the_command_line(scoped, companies):
    token, raw = ApiToken.issue("cli-bot", "reviewer", companies=[companies["ours"].pk])
    body = _get(raw, reverse("api-kept-sandboxes"), stage="all").json()
    assert [r["sandbox_id"] for r in body["results"]] == [scoped["ours"].provider_lease_id]


def test_metrics_count_a_limited_tokens_companies_only(scoped, limited_token, operator_token):
    def kept(raw) -> float:
        text = _get(raw, "/metrics").content.decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("paperclip_console_kept_sandboxes{")
        )

    _, everyone = operator_token
    assert kept(everyone) == 3
    assert kept(limited_token) == 1
    assert "reconciler_pass_records" not in _get(limited_token, "/metrics").content.decode()
