"""A task's owner (docs/rules.md, the people around a sandbox): whom the
console may address about a sandbox of that task.

Paperclip's issues name an assignee (a user, `assignee_user_id`, or an
agent, `assignee_agent_id`) and a creator (`created_by_user_id`). The owner
is the assignee user; else, for a task assigned to an agent, the user who
created it (an agent reads no mail: the person who gave it the work answers
for it); else the task's creator. A task with neither has no owner.
"""

from dataclasses import dataclass
from enum import StrEnum


class OwnedAs(StrEnum):
    """Why the owner is the owner, as the console says it."""

    ASSIGNEE = "assignee"
    CREATOR_OF_AGENT_TASK = "creator_of_agent_task"
    CREATOR = "creator"


@dataclass(frozen=True)
class Owner:
    """The owner's Paperclip user id and why; `name` and `email` are filled in
    by whoever read the user's row (`Issue.owner`), blank until then."""

    user_id: str
    owned_as: OwnedAs
    name: str = ""
    email: str = ""


def task_owner(
    assignee_user_id: str | None,
    assignee_agent_id: object | None,
    created_by_user_id: str | None,
) -> Owner | None:
    """The owner of a task with these people, or None when it has no user to own it."""
    if assignee_user_id:
        return Owner(str(assignee_user_id), OwnedAs.ASSIGNEE)
    if not created_by_user_id:
        return None
    if assignee_agent_id:
        return Owner(str(created_by_user_id), OwnedAs.CREATOR_OF_AGENT_TASK)
    return Owner(str(created_by_user_id), OwnedAs.CREATOR)
