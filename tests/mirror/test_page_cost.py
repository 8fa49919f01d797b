"""A page costs the same statements whatever its size (MIRROR_BATCH_SIZE, or
batch_size), placeholders included: the references a page names are created
in one insert-or-nothing statement, never looked up first (sandboxes/mirror/write.py
_ensure_exist). Counted on Django's path and on the psycopg cursors
bulk.py and write.py open themselves (COPY included)."""

import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from psycopg import sql

from sandboxes import models as m
from sandboxes.mirror import bulk, sync, write
from sandboxes.mirror.sync import mirror_once

from .counting import Counting
from .paperclip import termination

pytestmark = pytest.mark.django_db


def lease_page_costs(paperclip, monkeypatch, tasks: int, batch_size: int) -> list[tuple]:
    """(rows, statements) of each environment_leases page of a full mirror."""
    p = paperclip
    p.truncate()
    env = p.environment()
    for _ in range(tasks):
        p.task(env, metadata=lambda row: {"remoteExecutionTermination": termination(row)})
    monkeypatch.setattr(bulk, "Cursor", Counting)
    monkeypatch.setattr(write, "Cursor", Counting)
    costs = []

    def counted(table, page, report):
        Counting.statements = 0
        with CaptureQueriesContext(connection) as orm:
            write.apply_page(table, page, report)
        if table.name == "environment_leases":
            costs.append((len(page), len(orm.captured_queries) + Counting.statements))

    monkeypatch.setattr(sync, "apply_page", counted)
    report = mirror_once(p.dsn, full=True, batch_size=batch_size)
    assert report.tables["environment_leases"].applied == tasks, report.summary()
    return costs


def test_a_lease_page_costs_the_same_statements_at_any_page_size(paperclip, monkeypatch):
    small = lease_page_costs(paperclip, monkeypatch, tasks=7, batch_size=3)
    large = lease_page_costs(paperclip, monkeypatch, tasks=60, batch_size=5000)
    assert [rows for rows, _ in small] == [3, 3, 1] and [rows for rows, _ in large] == [60]
    assert {cost for _, cost in small} == {cost for _, cost in large}, (small, large)


def test_the_references_a_page_names_are_created_in_one_statement(monkeypatch):
    monkeypatch.setattr(write, "Cursor", Counting)
    issue = m.Issue.objects.create(id=uuid.uuid4(), key="PAP-1", title="kept", status="todo")
    environments = {uuid.uuid4() for _ in range(3)}
    user = "a-better-auth-user-id"
    Counting.statements = 0
    with transaction.atomic(), CaptureQueriesContext(connection) as orm:
        write._ensure_exist(
            {
                m.Environment: set(environments),
                m.Issue: {issue.pk, uuid.uuid4()},
                m.PaperclipUser: {user},
                m.Agent: set(),
            }
        )
    assert Counting.statements + len(orm.captured_queries) == 1
    # A callable placeholder default is evaluated per id (Environment's name).
    for pk in environments:
        env = m.Environment.objects.get(pk=pk)
        assert env.placeholder and env.name == f"environment {pk}"
    assert m.PaperclipUser.objects.get(pk=user).placeholder
    # A row already there is left as it is.
    kept = m.Issue.objects.get(pk=issue.pk)
    assert not kept.placeholder and kept.title == "kept"
    assert m.Issue.objects.filter(placeholder=True).count() == 1


def test_placeholders_are_inserted_in_id_order_whatever_order_they_were_named_in():
    # The order every writer takes its locks in: two writers creating the same
    # new rows in different orders could each wait on the other's.
    ids = [uuid.uuid4() for _ in range(200)]
    statement, params = bulk.placeholders(m.Issue, ids, timezone.now())
    with transaction.atomic(), connection.connection.cursor() as cur:
        cur.execute(sql.SQL("EXPLAIN (COSTS OFF) ") + statement, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "Sort Key: u.v0" in plan, plan


def test_a_forward_reference_is_a_placeholder_that_its_own_table_fills_in(paperclip):
    """An issue is read before the workspace it is bound to, and names a user
    Paperclip has no row for: both become placeholders on the issues page; the
    workspace's own page fills it in within the same iteration; the user stays one."""
    p = paperclip
    env = p.environment()
    issue, workspace, _, _ = p.task(
        env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
    )
    p.update("issues", issue["id"], assignee_user_id="nobody-yet")
    report = mirror_once(p.dsn, full=True)
    assert not report.problems, report.summary()
    bound = m.Issue.objects.get(pk=issue["id"])
    assert bound.bound_workspace_id == workspace["id"]
    assert not m.ExecutionWorkspace.objects.get(pk=workspace["id"]).placeholder
    assert m.PaperclipUser.objects.get(pk="nobody-yet").placeholder
