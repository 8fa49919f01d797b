"""The Paperclip tables the mirror reads, in dependency order, and the columns
it needs from each (docs/architecture.md, Mirror)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import translate


@dataclass(frozen=True)
class Table:
    name: str
    pk: str
    translate: Callable
    required: tuple[str, ...]  # without these the table cannot be read
    optional: tuple[str, ...] = ()  # read when present, else taken as NULL


# Dependency order: rows named by later tables usually exist by then, and a
# forward reference (an issue bound to a workspace not yet read) becomes a
# placeholder that the later table fills in within the same iteration.
# Columns are Paperclip's (packages/db/src/schema/*.ts). company_id is NOT NULL
# on every one of them there, but optional here: an installation without it
# (an older or adapted schema) still mirrors, its rows without a company.
TABLES = (
    # The people first: issues name them (docs/rules.md, the people around a
    # sandbox). companies.ts, auth.ts (better-auth's "user") and agents.ts.
    Table("companies", "id", translate.paperclip_company, ("id", "updated_at"), ("name",)),
    Table("user", "id", translate.paperclip_user, ("id", "updated_at"), ("name", "email")),
    Table("agents", "id", translate.agent, ("id", "updated_at"), ("company_id", "name")),
    Table(
        "environments",
        "id",
        translate.environment,
        ("id", "driver", "status", "updated_at"),
        ("company_id", "name", "config"),
    ),
    Table(
        "issues",
        "id",
        translate.issue,
        ("id", "status", "updated_at"),
        (
            "company_id",
            "identifier",
            "title",
            "execution_workspace_id",
            "assignee_user_id",
            "assignee_agent_id",
            "created_by_user_id",
        ),
    ),
    Table(
        "execution_workspaces",
        "id",
        translate.execution_workspace,
        ("id", "updated_at"),
        ("company_id", "source_issue_id", "status", "metadata"),
    ),
    Table(
        "heartbeat_runs",
        "id",
        translate.heartbeat_run,
        ("id", "status", "updated_at"),
        ("company_id", "native_issue_id", "context_snapshot", "started_at", "finished_at"),
    ),
    Table(
        "environment_leases",
        "id",
        translate.environment_lease,
        ("id", "environment_id", "status", "lease_policy", "provider_lease_id", "updated_at"),
        (
            "company_id",
            "provider",
            "execution_workspace_id",
            "issue_id",
            "heartbeat_run_id",
            "acquired_at",
            "last_used_at",
            "expires_at",
            "released_at",
            "failure_reason",
            "cleanup_status",
            "metadata",
        ),
    ),
    Table(
        "work_folder_runs",
        "run_id",
        translate.work_folder_run,
        ("run_id", "manifest", "state", "updated_at"),
        ("baselines", "last_saved_at"),
    ),
    Table(
        "issue_recovery_actions",
        "id",
        translate.recovery_action,
        ("id", "source_issue_id", "kind", "status", "updated_at"),
        ("company_id", "outcome", "evidence"),
    ),
)


def _named(*names: str) -> tuple[Table, ...]:
    return tuple(t for t in TABLES if t.name in names)


@dataclass(frozen=True)
class Step:
    """Tables mirrored one after another; with `shared`, by every mirror
    process at once, each its share of each table's rows (sync.py)."""

    tables: tuple[Table, ...]
    shared: bool = False


# TABLES in three steps. The middle step's tables name one another's rows only
# through placeholders, so with MIRROR_PROCESSES = N its rows are shared among
# N processes by a hash of each row's key, all reading one snapshot: each
# process mirrors its share of issues, workspaces, runs and leases, and every
# share costs about the same. The last step's rows find their leases by what
# the leases hold, so it waits for them.
STEPS: tuple[Step, ...] = (
    Step(_named("companies", "user", "agents", "environments")),
    Step(
        _named("issues", "execution_workspaces", "heartbeat_runs", "environment_leases"),
        shared=True,
    ),
    Step(_named("work_folder_runs", "issue_recovery_actions")),
)
