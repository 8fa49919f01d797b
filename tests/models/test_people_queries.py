"""A task's owner resolved to a name and an e-mail address (docs/rules.md, the
people around a sandbox): the rule is `sandboxes/rules/owner.py:task_owner`,
the users come from rows joined by one query, whatever the page's size."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sandboxes import models as m
from sandboxes.rules.owner import OwnedAs
from tests.factories import IssueFactory, RetirementFactory

pytestmark = pytest.mark.django_db


def users(n: int) -> list[m.PaperclipUser]:
    return [
        m.PaperclipUser.objects.create(pk=f"u-{i}", name=f"User {i}", email=f"u{i}@acme.test")
        for i in range(n)
    ]


def test_a_page_of_records_resolves_every_owner_in_one_query():
    people = users(3)
    agent = m.Agent.objects.create(pk="6f4740dc-32bc-5cce-8000-000000000001", name="coder")
    for n in range(12):
        record = RetirementFactory()
        issue = record.lease.issue
        if n % 3 == 0:
            issue.assignee_user = people[n % 3]
        elif n % 3 == 1:
            issue.assignee_agent, issue.created_by_user = agent, people[1]
        else:
            issue.created_by_user = people[2]
        issue.save()
    with CaptureQueriesContext(connection) as captured:
        owners = [r.lease.issue.owner() for r in m.Retirement.objects.with_owners()[:12]]
    assert len(captured) == 1
    assert sorted((o.owned_as, o.email) for o in owners) == sorted(
        [(OwnedAs.ASSIGNEE, "u0@acme.test")] * 4
        + [(OwnedAs.CREATOR_OF_AGENT_TASK, "u1@acme.test")] * 4
        + [(OwnedAs.CREATOR, "u2@acme.test")] * 4
    )


def test_issues_with_people_read_their_owners_in_one_query():
    people = users(2)
    for _ in range(5):
        IssueFactory(assignee_user=people[0], created_by_user=people[1])
    IssueFactory()  # nobody: no owner
    with CaptureQueriesContext(connection) as captured:
        owners = [issue.owner() for issue in m.Issue.objects.with_people()]
    assert len(captured) == 1
    assert sorted((o.name, o.email) if o else ("", "") for o in owners) == sorted(
        [("User 0", "u0@acme.test")] * 5 + [("", "")]
    )


def test_without_the_join_each_owner_costs_a_query():
    """What `with_people` saves: the plain queryset reads a user per issue."""
    people = users(1)
    for _ in range(3):
        IssueFactory(assignee_user=people[0])
    with CaptureQueriesContext(connection) as captured:
        [issue.owner() for issue in m.Issue.objects.all()]
    assert len(captured) == 1 + 3
