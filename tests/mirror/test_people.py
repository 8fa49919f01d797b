"""The people around a sandbox, mirrored from Paperclip's real DDL
(sandboxes/mirror/paperclip_schema.sql): companies, agents, better-auth's users
and each issue's assignee and creator (docs/rules.md, the people around a
sandbox).

The judge is paperclipai/paperclip: packages/db/src/schema/companies.ts (at
23474e298f38df4b4c775c5edea26995a32eb47f: id uuid, name text NOT NULL),
agents.ts (at 39437f4e6250cb91fadbc05b255b4b1b477fa9a7: id, company_id, name),
auth.ts (at fd77e0d27b52aad4fd52e4a5ca1c87b7bfcafd10: better-auth's "user",
id text, name and email text NOT NULL) and issues.ts (at
0016414f4eeee8f3e04defc862ffafd960b4f614: assignee_agent_id uuid references
agents, assignee_user_id and created_by_user_id text without a foreign key).
"""

from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sandboxes import models as m
from sandboxes.mirror.sync import mirror_once
from sandboxes.rules.owner import OwnedAs

pytestmark = pytest.mark.django_db


def mirror(paperclip):
    out = StringIO()
    call_command("mirror_paperclip", "--dsn", paperclip.dsn, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_companies_agents_and_users_are_mirrored_with_paperclips_values(paperclip):
    p = paperclip
    acme = p.company
    dana = p.user("Dana Scully", "dana@acme.test")
    other = p.switch_company("Globex")
    helper = p.agent_row("reviewer")
    out = mirror(p)
    assert "skipped 0; quarantined 0; tables missing: none" in out, out

    assert {(c.pk, c.name, c.placeholder) for c in m.Company.objects.all()} == {
        (acme["id"], "Acme", False),
        (other["id"], "Globex", False),
    }
    agent = m.Agent.objects.get(pk=helper["id"])
    assert (agent.name, agent.company_id, agent.placeholder) == ("reviewer", other["id"], False)
    user = m.PaperclipUser.objects.get(pk=dana["id"])
    assert (user.name, user.email, user.placeholder) == ("Dana Scully", "dana@acme.test", False)
    assert user.company_id is None  # Paperclip's users belong to no one company


def test_an_issue_carries_its_company_assignee_and_creator(paperclip):
    p = paperclip
    dana, erik = p.user("Dana", "dana@acme.test"), p.user("Erik", "erik@acme.test")
    by_user = p.issue(assignee_user_id=dana["id"], created_by_user_id=erik["id"])
    by_agent = p.issue(assignee_agent_id=p.agent["id"], created_by_user_id=erik["id"])
    mirror(p)
    issues = {i.pk: i for i in m.Issue.objects.with_people()}
    first, second = issues[by_user["id"]], issues[by_agent["id"]]
    assert first.company_id == p.company["id"]
    assert (first.assignee_user_id, first.assignee_agent_id, first.created_by_user_id) == (
        dana["id"],
        None,
        erik["id"],
    )
    assert (second.assignee_user_id, second.assignee_agent_id) == (None, p.agent["id"])
    owner = first.owner()
    assert (owner.user_id, owner.owned_as, owner.name, owner.email) == (
        dana["id"],
        OwnedAs.ASSIGNEE,
        "Dana",
        "dana@acme.test",
    )
    owner = second.owner()
    assert (owner.owned_as, owner.email) == (OwnedAs.CREATOR_OF_AGENT_TASK, "erik@acme.test")


def test_a_user_id_no_user_row_holds_becomes_a_placeholder(paperclip):
    """assignee_user_id has no foreign key in Paperclip: an issue may name a
    user the "user" table lacks (a local board's implicit user). The issue is
    mirrored; the user is a placeholder without name or address."""
    p = paperclip
    issue = p.issue(assignee_user_id="local-board")
    out = mirror(p)
    assert "skipped 0" in out, out
    user = m.PaperclipUser.objects.get(pk="local-board")
    assert user.placeholder and user.email == ""
    assert m.Issue.objects.with_people().get(pk=issue["id"]).owner().email == ""


def test_a_user_arriving_later_fills_the_placeholder_in(paperclip):
    p = paperclip
    issue = p.issue(created_by_user_id="u-later")
    mirror(p)
    assert m.PaperclipUser.objects.get(pk="u-later").placeholder
    p.user("Late", "late@acme.test", id="u-later")
    mirror(p)
    user = m.PaperclipUser.objects.get(pk="u-later")
    assert (user.placeholder, user.email) == (False, "late@acme.test")
    assert m.Issue.objects.with_people().get(pk=issue["id"]).owner().name == "Late"


def test_a_renamed_user_is_mirrored_again_on_a_newer_updated_at(paperclip):
    p = paperclip
    user = p.user("Dana", "dana@old.test")
    mirror(p)
    p.update("user", user["id"], email="dana@new.test")
    mirror(p)
    assert m.PaperclipUser.objects.get(pk=user["id"]).email == "dana@new.test"


def test_people_are_read_keyset_paged_in_fixed_queries_per_page(paperclip, settings):
    """As every table: pages of MIRROR_BATCH_SIZE in (updated_at, id) order,
    each written with a fixed number of queries whatever its size."""
    p = paperclip
    for n in range(7):
        p.user(f"user {n}", f"u{n}@acme.test")
    with CaptureQueriesContext(connection) as small:
        report = mirror_once(p.dsn, batch_size=3)
    assert report.tables["user"].read == 7 and report.tables["user"].applied == 7
    for n in range(7, 40):
        p.user(f"user {n}", f"u{n}@acme.test")
    with CaptureQueriesContext(connection) as large:
        report = mirror_once(p.dsn, full=True, batch_size=1000)
    assert report.tables["user"].read == 40
    assert m.PaperclipUser.objects.filter(placeholder=False).count() == 40
    # 7 users in 3 pages cost no fewer queries than 40 users in one.
    assert len(large.captured_queries) <= len(small.captured_queries)


def test_an_installation_without_the_user_table_still_mirrors(paperclip):
    p = paperclip
    issue = p.issue(assignee_user_id="someone")
    with psycopg.connect(p.dsn, autocommit=True) as conn:
        conn.execute('ALTER TABLE "user" RENAME TO "user_gone"')
    try:
        report = mirror_once(p.dsn)
    finally:
        with psycopg.connect(p.dsn, autocommit=True) as conn:
            conn.execute('ALTER TABLE "user_gone" RENAME TO "user"')
    assert "user" in report.tables_missing
    assert m.Issue.objects.get(pk=issue["id"]).assignee_user_id == "someone"


def test_a_user_id_with_surrounding_space_is_skipped_and_named(paperclip):
    p = paperclip
    p.issue(assignee_user_id=" dana")
    report = mirror_once(p.dsn)
    assert report.tables["issues"].skipped == 1
    assert any("assignee_user_id is not a user id" in x.reason for x in report.problems)


def test_the_fixture_keeps_paperclips_people_columns(paperclip):
    """The DDL fixture is Paperclip's: user ids are text, an agent id a uuid."""
    with psycopg.connect(paperclip.dsn) as conn:
        found = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, data_type"
                " FROM information_schema.columns WHERE (table_name, column_name) IN"
                " (('user', 'id'), ('user', 'email'), ('issues', 'assignee_user_id'),"
                " ('issues', 'created_by_user_id'), ('issues', 'assignee_agent_id'),"
                " ('agents', 'company_id'), ('companies', 'name'))"
            ).fetchall()
        )
    assert found == {
        "user.id": "text",
        "user.email": "text",
        "issues.assignee_user_id": "text",
        "issues.created_by_user_id": "text",
        "issues.assignee_agent_id": "uuid",
        "agents.company_id": "uuid",
        "companies.name": "text",
    }
