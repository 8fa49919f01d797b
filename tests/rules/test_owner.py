"""A task's owner (docs/rules.md, the people around a sandbox): the assignee
user, else the creator of an agent-assigned task, else the creator. The
columns are Paperclip's issues.assignee_user_id, assignee_agent_id and
created_by_user_id (paperclipai/paperclip packages/db/src/schema/issues.ts at
0016414f4eeee8f3e04defc862ffafd960b4f614; user ids are better-auth's text ids)."""

import pytest

from sandboxes.rules.owner import OwnedAs, Owner, task_owner

AGENT = "7d1f0d0e-0000-4000-8000-000000000001"


def test_the_assignee_user_owns_the_task_whoever_created_it():
    assert task_owner("dana", None, "erik") == Owner("dana", OwnedAs.ASSIGNEE)


def test_an_assignee_user_wins_over_an_agent_assignee_too():
    assert task_owner("dana", AGENT, "erik") == Owner("dana", OwnedAs.ASSIGNEE)


def test_the_creator_owns_an_agent_assigned_task():
    assert task_owner(None, AGENT, "erik") == Owner("erik", OwnedAs.CREATOR_OF_AGENT_TASK)


def test_the_creator_owns_an_unassigned_task():
    assert task_owner(None, None, "erik") == Owner("erik", OwnedAs.CREATOR)


@pytest.mark.parametrize("agent", [None, AGENT])
def test_a_task_created_by_no_user_and_assigned_to_none_has_no_owner(agent):
    assert task_owner(None, agent, None) is None


def test_empty_ids_name_nobody():
    assert task_owner("", None, "") is None
    assert task_owner("", AGENT, "erik") == Owner("erik", OwnedAs.CREATOR_OF_AGENT_TASK)
