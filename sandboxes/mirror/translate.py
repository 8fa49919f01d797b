"""Paperclip rows → console rows: pure functions over the source's dicts.

Each translator reads Paperclip's real columns (paperclipai/paperclip
packages/db/src/schema/*.ts; the shapes of lease metadata come from the
writers under server/src/services/) and returns a `Row` (the console fields,
the ids it references, the receipts, intents and exports its metadata holds)
or raises `Malformed` with a reason the mirror reports (the value readers are
in `values.py`, what a lease's metadata holds in `lease_metadata.py`). A lease whose metadata
cannot be read is still mirrored (its status matters to other rows' holds) but
*quarantined*: stored as a placeholder, so the reconciler never judges it, and
without receipts.

Paperclip declares no CHECK on its status-like text columns: a newer Paperclip
may write a value this console does not know. Such a row is skipped, counted
and named ("unknown status 'paused'"), never guessed at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from sandboxes.models import (
    Agent,
    Company,
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    PaperclipUser,
    RecoveryAction,
)
from sandboxes.models.choices import (
    CleanupStatus,
    EnvironmentDriver,
    EnvironmentStatus,
    IssueStatus,
    LeasePolicy,
    LeaseStatus,
    RecoveryStatus,
    RunStatus,
    SaveState,
)
from sandboxes.models.mirror import MirroredModel

from .lease_metadata import lease_metadata
from .values import (
    MIRROR_NAMESPACE,
    Malformed,
    NotASandbox,
    _choice,
    _json_object,
    _text,
    _uuid,
    _when,
)

# Work-folder scopes whose baselines are saved files (packages/shared
# work-folders.ts WORK_FOLDER_SCOPES); "incoming:<scope>" and
# "incomingRemoved:<scope>" keys are in-flight provenance, not a save.
WORK_FOLDER_SCOPES = ("task", "agent", "user", "project")

# Where a recovery action's evidence names its leases.
RESTORE_EVIDENCE_KEY = "workspaceRestoreRecovery"  # workspace-restore-recovery-state.ts


@dataclass
class Row:
    model: type[MirroredModel]
    pk: UUID  # a Paperclip user's is its text id (`paperclip_user`)
    fields: dict
    refs: dict[type[MirroredModel], set[UUID]] = field(default_factory=dict)
    receipts: list[dict] = field(default_factory=list)
    intents: list[dict] = field(default_factory=list)
    exports: list[dict] = field(default_factory=list)
    quarantined: str = ""  # why, when the row is kept out of the reconciler's view
    quarantine_kind: str = ""

    def ref(self, model: type[MirroredModel], pk: Any) -> Any:
        if pk is not None:
            self.refs.setdefault(model, set()).add(pk)
        return pk


# --- tables -------------------------------------------------------------------


def company(src: dict) -> UUID | None:
    """The row's company_id: NOT NULL in Paperclip, None from an installation
    without the column. Paperclip's predicates bind receipts to it
    (docs/rules.md, proof)."""
    return _uuid(src.get("company_id"), "company_id")


def environment_provider(driver: str, config: dict) -> str:
    """Paperclip's provider key: the environment's config names it (a sandbox
    environment's `config.provider`), else the driver is the provider
    (`local`, `ssh`; a plugin driver without a key stays `plugin`)."""
    provider = config.get("provider")
    if isinstance(provider, str) and provider.strip():
        return provider.strip()[:64]
    return driver


def environment(src: dict) -> Row:
    pk = _uuid(src.get("id"), "id", required=True)
    driver = _choice(src.get("driver"), EnvironmentDriver, "driver")
    config = _json_object(src.get("config"), "config")
    return Row(
        Environment,
        pk,
        {
            "company_id": company(src),
            "name": _text(src.get("name"), 200) or f"environment {pk}",
            "driver": driver,
            "provider": environment_provider(driver, config),
            "status": _choice(src.get("status"), EnvironmentStatus, "status"),
        },
    )


def user_id(value, what: str, *, required=False) -> str | None:
    """A Paperclip user's id: better-auth's text id (auth.ts `user.id`), named
    as text by issues.assignee_user_id / created_by_user_id (no foreign key)."""
    if value is None or value == "":
        if required:
            raise Malformed(f"{what} is missing")
        return None
    if not isinstance(value, str) or len(value) > 255 or value != value.strip():
        raise Malformed(f"{what} is not a user id: {value!r}", f"{what} is not a user id")
    return value


def paperclip_company(src: dict) -> Row:
    """companies (companies.ts): id, name. The company is its own company_id."""
    pk = _uuid(src.get("id"), "id", required=True)
    return Row(Company, pk, {"company_id": pk, "name": _text(src.get("name"), 200)})


def paperclip_user(src: dict) -> Row:
    """better-auth's user (auth.ts `authUsers`): id (text), name, email."""
    pk = user_id(src.get("id"), "id", required=True)
    fields = {"name": _text(src.get("name"), 200), "email": _text(src.get("email"), 320)}
    return Row(PaperclipUser, pk, fields)  # type: ignore[arg-type]


def agent(src: dict) -> Row:
    """agents (agents.ts): id, company_id, name."""
    pk = _uuid(src.get("id"), "id", required=True)
    return Row(Agent, pk, {"company_id": company(src), "name": _text(src.get("name"), 200)})


def issue(src: dict) -> Row:
    row = Row(Issue, _uuid(src.get("id"), "id", required=True), {})
    row.fields = {
        "company_id": company(src),
        "key": _text(src.get("identifier"), 64),
        "title": _text(src.get("title"), 500),
        "status": _choice(src.get("status"), IssueStatus, "status"),
        "bound_workspace_id": row.ref(
            ExecutionWorkspace, _uuid(src.get("execution_workspace_id"), "execution_workspace_id")
        ),
        # Its people (docs/rules.md, the people around a sandbox).
        "assignee_user_id": row.ref(
            PaperclipUser, user_id(src.get("assignee_user_id"), "assignee_user_id")
        ),
        "assignee_agent_id": row.ref(
            Agent, _uuid(src.get("assignee_agent_id"), "assignee_agent_id")
        ),
        "created_by_user_id": row.ref(
            PaperclipUser, user_id(src.get("created_by_user_id"), "created_by_user_id")
        ),
    }
    return row


def execution_workspace(src: dict) -> Row:
    row = Row(ExecutionWorkspace, _uuid(src.get("id"), "id", required=True), {})
    metadata = _json_object(src.get("metadata"), "metadata")
    row.fields = {
        "company_id": company(src),
        # execution_workspaces.source_issue_id: the task the workspace serves.
        "issue_id": row.ref(Issue, _uuid(src.get("source_issue_id"), "source_issue_id")),
        "status": _text(src.get("status"), 32) or "active",
        # The writer hold (seed 003: the workspace "stayed dirty with
        # writerRunId set to the cancelled run").
        "writer_run_id": row.ref(
            HeartbeatRun, _uuid(metadata.get("writerRunId"), "metadata.writerRunId")
        ),
    }
    return row


def run_issue_id(src: dict) -> UUID | None:
    """A run's task. heartbeat_runs has no issue_id: Paperclip reads it as
    coalesce(native_issue_id::text, context_snapshot->>'issueId')
    (server/src/services/legacy-execution-recovery.ts and the
    heartbeat_runs_company_issue_coalesce_created_idx index)."""
    native = _uuid(src.get("native_issue_id"), "native_issue_id")
    if native is not None:
        return native
    snapshot = _json_object(src.get("context_snapshot"), "context_snapshot")
    return _uuid(snapshot.get("issueId"), "context_snapshot.issueId")


def heartbeat_run(src: dict) -> Row:
    row = Row(HeartbeatRun, _uuid(src.get("id"), "id", required=True), {})
    row.fields = {
        "company_id": company(src),
        "issue_id": row.ref(Issue, run_issue_id(src)),
        "status": _choice(src.get("status"), RunStatus, "status"),
        "started_at": _when(src.get("started_at"), "started_at"),
        "finished_at": _when(src.get("finished_at"), "finished_at"),
    }
    return row


def environment_lease(src: dict) -> Row:
    pk = _uuid(src.get("id"), "id", required=True)
    sandbox = src.get("provider_lease_id")
    if sandbox is None or (isinstance(sandbox, str) and not sandbox.strip()):
        raise NotASandbox(f"lease {pk} has no provider_lease_id")
    if not isinstance(sandbox, str):
        raise Malformed(
            f"provider_lease_id is not text: {sandbox!r}", "provider_lease_id is not text"
        )
    if len(sandbox) > 200:
        raise Malformed("provider_lease_id is longer than 200 characters")
    provider = src.get("provider")
    if provider is not None and (not isinstance(provider, str) or len(provider) > 64):
        raise Malformed(f"provider is not a provider key: {provider!r}", "provider is not a key")
    row = Row(EnvironmentLease, pk, {})
    row.fields = {
        "company_id": company(src),
        "environment_id": row.ref(
            Environment, _uuid(src.get("environment_id"), "environment_id", required=True)
        ),
        "execution_workspace_id": row.ref(
            ExecutionWorkspace, _uuid(src.get("execution_workspace_id"), "execution_workspace_id")
        ),
        "issue_id": row.ref(Issue, _uuid(src.get("issue_id"), "issue_id")),
        "heartbeat_run_id": row.ref(
            HeartbeatRun, _uuid(src.get("heartbeat_run_id"), "heartbeat_run_id")
        ),
        "status": _choice(src.get("status"), LeaseStatus, "status"),
        "lease_policy": _choice(src.get("lease_policy"), LeasePolicy, "lease_policy"),
        # Nullable in Paperclip; the sync fills a missing one from the environment.
        "provider": (provider or "").strip(),
        "provider_lease_id": sandbox,
        "acquired_at": _when(src.get("acquired_at"), "acquired_at"),
        "last_used_at": _when(src.get("last_used_at"), "last_used_at"),
        "expires_at": _when(src.get("expires_at"), "expires_at"),
        "released_at": _when(src.get("released_at"), "released_at"),
        "failure_reason": _text(src.get("failure_reason"), 200),
        "cleanup_status": _choice(
            src.get("cleanup_status"), CleanupStatus, "cleanup_status", nullable=True
        ),
        "metadata": {},
    }
    metadata = src.get("metadata")
    try:
        metadata = _json_object(metadata, "metadata")
        found = lease_metadata(pk, sandbox, metadata, row.fields["company_id"])
    except Malformed as exc:
        row.quarantined, row.quarantine_kind = str(exc), exc.kind
        row.fields["metadata"] = metadata if isinstance(metadata, dict) else {"raw": metadata}
        return row
    # The canonical working directory is top-level metadata.remoteCwd; older
    # rows kept it under reusableSandboxLease.
    row.fields["metadata"] = dict(metadata)
    if found.remote_cwd:
        row.fields["metadata"]["remoteCwd"] = found.remote_cwd
    for receipt in found.receipts:
        row.ref(HeartbeatRun, receipt["run_id"])
    row.receipts, row.intents, row.exports = found.receipts, found.intents, found.exports
    return row


def recovery_action(src: dict) -> list[Row]:
    """One console row per lease the action names: Paperclip's restore
    evidence lists them in evidence.workspaceRestoreRecovery.leaseIds
    (legacy-execution-recovery.ts), and the reconciler counts the actions that
    name each lease. The first keeps the action's id; the others get ids
    derived from (action, lease). An action naming no lease counts for its task."""
    pk = _uuid(src.get("id"), "id", required=True)
    evidence = _json_object(src.get("evidence"), "evidence")
    restore = _json_object(evidence.get(RESTORE_EVIDENCE_KEY), f"evidence.{RESTORE_EVIDENCE_KEY}")
    lease_ids = restore.get("leaseIds") or []
    if not isinstance(lease_ids, list):
        raise Malformed(f"evidence.{RESTORE_EVIDENCE_KEY}.leaseIds is not a list")
    leases = list(
        dict.fromkeys(
            _uuid(x, f"evidence.{RESTORE_EVIDENCE_KEY}.leaseIds[]", required=True)
            for x in lease_ids
        )
    )
    fields: dict[str, Any] = {
        "company_id": company(src),
        "source_issue_id": _uuid(src.get("source_issue_id"), "source_issue_id", required=True),
        "kind": _text(src.get("kind"), 64),
        "status": _choice(src.get("status"), RecoveryStatus, "status"),
        "outcome": _text(src.get("outcome"), 200),
        "evidence": evidence,
    }
    rows = []
    for i, lease_id in enumerate(leases or [None]):
        row_pk = pk if i == 0 else uuid.uuid5(MIRROR_NAMESPACE, f"recovery:{pk}:{lease_id}")
        row = Row(RecoveryAction, row_pk, dict(fields))
        row.ref(Issue, fields["source_issue_id"])
        row.fields["lease_id"] = row.ref(EnvironmentLease, lease_id)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Save:
    """A work-folder run's durable save, applied to its sandbox's workspace."""

    run_id: UUID
    lease_id: UUID | None
    sandbox_key: str
    state: str
    saved_at: datetime | None
    final_checkpoint_at: datetime | None
    manifest: dict | None  # path → {sha256, size}; None unless the save is committed


def saved_manifest(baselines: dict) -> dict:
    """path → {sha256, size} of every saved file: each scope's baseline entries
    ({path, kind, byteSize, sha256, executable}) under "<scope>/<path>"."""
    files = {}
    for scope in WORK_FOLDER_SCOPES:
        entries = baselines.get(scope)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise Malformed(f"baselines[{scope!r}] is not a list")
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise Malformed(f"baselines[{scope!r}] holds an entry without a path")
            if entry.get("kind", "file") == "directory":
                continue
            sha, size = entry.get("sha256"), entry.get("byteSize")
            if (
                not isinstance(sha, str)
                or len(sha) != 64
                or isinstance(size, bool)
                or not isinstance(size, int)
                or size < 0
            ):
                raise Malformed(
                    f"baselines[{scope!r}] entry {entry['path']!r} is not {{sha256, byteSize}}",
                    "baseline entry is not {sha256, byteSize}",
                )
            files[f"{scope}/{entry['path']}"] = {"sha256": sha.lower(), "size": size}
    return files


def work_folder_run(src: dict) -> Save:
    run_id = _uuid(src.get("run_id"), "run_id", required=True)
    manifest = _json_object(src.get("manifest"), "manifest")
    state = _choice(src.get("state"), SaveState, "state")
    final = _when(manifest.get("finalCheckpointAt"), "manifest.finalCheckpointAt")
    lease_id = _uuid(manifest.get("leaseId"), "manifest.leaseId")
    sandbox_key = manifest.get("sandboxKey")
    if not isinstance(sandbox_key, str):
        sandbox_key = ""
    if lease_id is None and not sandbox_key:
        raise Malformed("manifest names no lease (leaseId) or sandbox (sandboxKey)")
    files = None
    if state == SaveState.SAVED and final is not None:
        files = saved_manifest(_json_object(src.get("baselines"), "baselines"))
    elif state == SaveState.SAVED:
        # A periodic checkpoint: durable so far, but the run may still write.
        # Only the final checkpoint (finalCheckpointAt) is a committed save.
        state = SaveState.SAVING
    return Save(
        run_id=run_id,
        lease_id=lease_id,
        sandbox_key=sandbox_key[:200],
        state=state,
        saved_at=_when(src.get("last_saved_at"), "last_saved_at"),
        final_checkpoint_at=final,
        manifest=files,
    )
