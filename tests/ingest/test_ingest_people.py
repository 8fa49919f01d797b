"""The people through ingest (docs/rules.md, the people around a sandbox):
`company.upserted`, `user.upserted`, `agent.upserted`, and `issue.upserted`'s
`company_id`, `assignee_user_id`, `assignee_agent_id`, `created_by_user_id`.

Paperclip's shapes (paperclipai/paperclip packages/db/src/schema/): a user's
id is better-auth's text id (auth.ts at fd77e0d27b52aad4fd52e4a5ca1c87b7bfcafd10),
which issues name as text (issues.ts at 0016414f4eeee8f3e04defc862ffafd960b4f614);
companies and agents have uuids (companies.ts, agents.ts). Set-based as the
rest of ingest, the newer source time wins, and a bad field is a 400 naming it.
"""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.events import Events, uid
from sandboxes import models as m
from sandboxes.ingest import apply_events, validate_batch
from sandboxes.ingest import schemas as s
from sandboxes.rules.owner import OwnedAs

from .test_ingest_fast_path import same, slow

pytestmark = pytest.mark.django_db

T0, T1, T2 = (f"2026-11-01T0{h}:00:00Z" for h in range(3))
ev = Events()


def ingest(events):
    batch, errors = validate_batch({"events": events}, max_events=1000)
    assert not errors, errors
    return apply_events("test", batch)


def test_companies_users_and_agents_land_with_an_issue_naming_them():
    company, agent, issue = uid(), uid(), uid()
    result = ingest(
        [
            ev.company(company, "Acme"),
            ev.user("u-dana", "Dana Scully", "dana@acme.test"),
            ev.agent(agent, "coder", company_id=company),
            ev.issue(
                issue,
                "in_progress",
                company_id=company,
                assignee_agent_id=agent,
                created_by_user_id="u-dana",
            ),
        ]
    )
    assert result.accepted == 4
    assert m.Company.objects.get().name == "Acme"
    assert (m.Agent.objects.get().name, str(m.Agent.objects.get().company_id)) == ("coder", company)
    row = m.Issue.objects.with_people().get(pk=issue)
    assert (str(row.company_id), str(row.assignee_agent_id), row.created_by_user_id) == (
        company,
        agent,
        "u-dana",
    )
    owner = row.owner()
    assert (owner.owned_as, owner.name, owner.email) == (
        OwnedAs.CREATOR_OF_AGENT_TASK,
        "Dana Scully",
        "dana@acme.test",
    )


def test_people_named_before_their_upsert_are_placeholders_filled_in_later():
    issue, agent = uid(), uid()
    ingest([ev.issue(issue, "todo", assignee_user_id="u-erik", assignee_agent_id=agent)])
    assert m.PaperclipUser.objects.get(pk="u-erik").placeholder
    assert m.Agent.objects.get(pk=agent).placeholder
    ingest([ev.user("u-erik", "Erik", "erik@acme.test"), ev.agent(agent, "coder")])
    user = m.PaperclipUser.objects.get(pk="u-erik")
    assert (user.placeholder, user.email) == (False, "erik@acme.test")
    assert m.Issue.objects.with_people().get(pk=issue).owner().email == "erik@acme.test"


def test_the_newer_source_time_wins_for_people_too():
    ingest([ev.user("u-dana", "Dana", "dana@new.test", at=T2)])
    ingest([ev.user("u-dana", "Dana", "dana@old.test", at=T1)])  # late, older
    assert m.PaperclipUser.objects.get().email == "dana@new.test"
    issue = uid()
    ingest([ev.issue(issue, "todo", assignee_user_id="u-dana", at=T2)])
    ingest([ev.issue(issue, "todo", assignee_user_id="u-erik", at=T1)])
    assert m.Issue.objects.get().assignee_user_id == "u-dana"
    ingest([ev.issue(issue, "todo", assignee_user_id=None, created_by_user_id="u-dana", at=T2)])
    row = m.Issue.objects.with_people().get()
    assert row.assignee_user_id is None and row.owner().owned_as is OwnedAs.CREATOR


def test_an_issue_upsert_without_people_keeps_the_ones_it_has():
    issue = uid()
    ingest([ev.issue(issue, "todo", assignee_user_id="u-dana", at=T0)])
    ingest([ev.issue(issue, "done", at=T1)])
    assert m.Issue.objects.get().assignee_user_id == "u-dana"


def test_a_user_id_with_quotes_commas_and_braces_is_stored_as_sent():
    """A user's id is free text: the batch's read of the rows it names quotes
    every element of its id array."""
    odd = 'a,"b"}{c\\d'
    ingest([ev.user(odd, "Odd", "odd@acme.test")])
    ingest([ev.user(odd, "Odd", "odd@new.test", at=T1)])
    assert m.PaperclipUser.objects.get(pk=odd).email == "odd@new.test"


@pytest.mark.parametrize(
    "event, path",
    [
        (lambda: ev.user("u-1", "Dana", "not-an-address"), "data.email"),
        (lambda: ev.user("u 1", "Dana", "d@acme.test"), "data.user_id"),
        (
            lambda: ev.event("user.upserted", {"user_id": 7, "name": "D", "email": "d@a.b"}),
            "data.user_id",
        ),
        (lambda: ev.event("user.upserted", {"user_id": "u-1", "email": "d@a.b"}), "data.name"),
        (lambda: ev.company("not-a-uuid", "Acme"), "data.company_id"),
        (lambda: ev.company(uid(), "x" * 201), "data.name"),
        (lambda: ev.agent(uid(), "coder", company_id="acme"), "data.company_id"),
        (lambda: ev.issue(uid(), "todo", assignee_agent_id="coder"), "data.assignee_agent_id"),
        (lambda: ev.issue(uid(), "todo", assignee_user_id=""), "data.assignee_user_id"),
        (lambda: ev.issue(uid(), "todo", created_by_user_id=["u"]), "data.created_by_user_id"),
        (lambda: ev.issue(uid(), "todo", company_id="acme"), "data.company_id"),
    ],
)
def test_a_bad_field_is_a_400_naming_it_and_nothing_is_applied(post_events, event, path):
    good = ev.user("u-good", "Good", "good@acme.test")
    response = post_events([good, event()])
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [(e["index"], e["path"]) for e in errors] == [(1, path)], errors
    assert not m.PaperclipUser.objects.exists()
    assert not m.IngestedEvent.objects.exists()


def test_the_fast_path_and_the_detailed_path_read_people_alike():
    company, agent = uid(), uid()
    events = [
        ev.company(company, "Acme"),
        ev.user("u-dana", "Dana", "dana@acme.test"),
        ev.agent(agent, "coder", company_id=company),
        ev.issue(uid(), "todo", assignee_agent_id=agent, created_by_user_id="u-dana"),
    ]
    body = json.dumps({"events": events}).encode()
    fast = s.fast_validate_body(body, max_events=1000)
    detailed, errors = slow(body)
    assert fast is not None and not errors
    same(detailed, fast)


def people_batch(n: int) -> list[dict]:
    """n events: companies, users, agents and issues naming them, a quarter each."""
    events = []
    for i in range(n // 4):
        company, agent, user = uid(), uid(), f"user-{uid()[:8]}-{i}"
        events += [
            ev.company(company, f"company {i}"),
            ev.user(user, f"user {i}", f"user{i}@acme.test"),
            ev.agent(agent, f"agent {i}", company_id=company),
            ev.issue(
                uid(), "todo", company_id=company, assignee_agent_id=agent, created_by_user_id=user
            ),
        ]
    return events


def queries_for(events) -> int:
    with CaptureQueriesContext(connection) as captured:
        ingest(events)
    return len(captured)


def test_a_batch_of_people_costs_the_same_queries_at_8_and_at_1000_events():
    small, large = people_batch(8), people_batch(1000)
    assert queries_for(small) == queries_for(large)
    assert m.PaperclipUser.objects.filter(placeholder=False).count() == 2 + 250
    # ... and again, as updates of rows that exist.
    for e in small + large:
        e["id"], e["occurred_at"] = f"again-{e['id']}", T1
    assert queries_for(small) == queries_for(large)
