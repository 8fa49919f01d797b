"""A scratch PostgreSQL database built from Paperclip's real DDL
(sandboxes/mirror/paperclip_schema.sql, rebuilt from paperclipai/paperclip
packages/db/src/schema/*.ts and its migrations), and a row builder that writes
rows exactly as Paperclip's TypeScript does:

- receipts as remote-execution-termination.ts `remoteTerminationReceipt` and
  sandbox-stop-and-retain.ts `settleStopOnlyCleanup` write them;
- the stop intent as `prepareSandboxStopAndRetain` writes it (lease →
  pending_cleanup, failure_reason sandbox_stop_pending) and its settlement
  (key removed, receipts added, lease → released);
- the export-resume marker as native-workspace-export-resume.ts reads it;
- `sandboxLeaseAcquisition` as adapter-utils' SandboxLeaseAcquisition
  ({outcome: created | resumed | replacement, providerLeaseId, reason?});
- work_folder_runs as server/src/services/sandbox-work-folders
  (prepareSandboxWorkFolders) writes them: manifest {version, companyId,
  runId, taskId, agentId, …, leaseId, sandboxKey, home, finalCheckpointAt?,
  folders, repositories} and baselines {scope: [{path, kind, byteSize,
  sha256, executable}]};
- restore recovery as legacy-execution-recovery.ts: the action's evidence
  {workspaceRestoreRecovery: {schema, leaseIds: [...]}} and the lease's
  metadata {workspaceRestoreRecovery: {schema, runId}} with lease_policy
  retain_on_failure, as legacy-workspace-restore-recovery.ts
  preserveLegacyWorkspaceRestoreSources writes them (`preserve_restore_source`);
- every row with its company_id (`switch_company` for another company);
- the people: companies (companies.ts: a unique issue_prefix each), agents
  (agents.ts) and better-auth's "user" rows (auth.ts: a text id, name and
  email, timestamps without defaults, written by better-auth itself), which
  issues name in assignee_user_id / created_by_user_id (text, no foreign key)
  and assignee_agent_id (`user`, `agent`, `issue(assignee_user_id=…)`).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

SCHEMA = Path(__file__).resolve().parents[2] / "sandboxes/mirror/paperclip_schema.sql"
SERVER = "postgresql://postgres@127.0.0.1:5432"
TABLES = (
    "work_folder_runs",
    "issue_recovery_actions",
    "environment_leases",
    "heartbeat_runs",
    "execution_workspaces",
    "issues",
    "environments",
    "agents",
    "user",
    "companies",
)
RESTORE_SCHEMA = "paperclip.workspace-restore-recovery.v1"


def create_database(name: str, ddl: str | None = None) -> str:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{SERVER}/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl if ddl is not None else SCHEMA.read_text())
    return dsn


def drop_database(name: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scratch_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def ago(**kwargs) -> datetime:
    return datetime.now(UTC) - timedelta(**kwargs)


def iso(at: datetime) -> str:
    """JavaScript's Date.toISOString(): UTC, milliseconds, a Z."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- lease metadata in Paperclip's shapes --------------------------------------


def termination(lease: dict, *, state="stopped", at: datetime | None = None, **overrides) -> dict:
    """remote-execution-termination.ts remoteTerminationReceipt(lease, receipt)."""
    return {
        "schema": "paperclip.remote-termination.v1",
        "companyId": str(lease["company_id"]),
        "runId": str(lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "provider": lease["provider"],
        "providerLeaseId": lease["provider_lease_id"],
        "state": state,
        "confirmedAt": iso(at or ago(hours=1)),
        **overrides,
    }


def stop_intent(lease: dict, request_id: str | None = None) -> dict:
    """sandbox-stop-and-retain.ts prepareSandboxStopAndRetain's intent (builtin provider)."""
    return {
        "schema": "paperclip.sandbox-stop-and-retain.v1",
        "requestId": request_id or str(uuid.uuid4()),
        "companyId": str(lease["company_id"]),
        "runId": str(lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "provider": lease["provider"],
        "providerLeaseId": lease["provider_lease_id"],
        "builtinProvider": lease["provider"],
    }


def stop_receipt(lease: dict, request_id: str, *, at: datetime | None = None) -> dict:
    """sandbox-stop-and-retain.ts settleStopOnlyCleanup's sandboxStopAndRetainReceipt."""
    return {
        "schema": "paperclip.sandbox-stop-and-retain-receipt.v1",
        "requestId": request_id,
        "companyId": str(lease["company_id"]),
        "runId": str(lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "provider": lease["provider"],
        "providerLeaseId": lease["provider_lease_id"],
        "builtinProvider": lease["provider"],
        "method": "builtin.stopLease",
        "confirmedAt": iso(at or ago(hours=1)),
    }


def export_resume_marker(lease: dict, plugin_id: str) -> dict:
    """native-workspace-export-resume.ts: the marker readNativeWorkspaceExportResume accepts."""
    return {
        "schema": "paperclip.workspace-export-resume.v2",
        "companyId": str(lease["company_id"]),
        "runId": str(lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "provider": lease["provider"],
        "providerLeaseId": lease["provider_lease_id"],
        "requestId": str(uuid.uuid4()),
        "resultId": sha(str(lease["id"])),
        "pluginId": plugin_id,
    }


class Paperclip:
    """Writes rows into the scratch Paperclip database (a normal, writable connection)."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True)
        self._n = 0
        self.company = None
        self.agent = None

    def close(self):
        self.conn.close()

    def truncate(self):
        present = {
            r[0]
            for r in self.conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        tables = [t for t in TABLES if t in present]
        if tables:
            quoted = ", ".join(f'"{t}"' for t in tables)  # "user" is a keyword
            self.conn.execute(f"TRUNCATE {quoted} CASCADE")
        self.switch_company("Acme")

    def switch_company(self, name: str) -> dict:
        """A new company (with its agent) that later rows belong to: Paperclip
        is multi-company, every row names one."""
        pk = uuid.uuid4()
        # companies_issue_prefix_idx is unique: each company its own prefix.
        self.company = self._insert(
            "companies", {"id": pk, "name": name, "issue_prefix": f"C{pk.hex[:8].upper()}"}
        )
        self.agent = self.agent_row("coder")
        return self.company

    def agent_row(self, name: str, **kw) -> dict:
        return self._insert(
            "agents", {"id": uuid.uuid4(), "company_id": self.company["id"], "name": name, **kw}
        )

    def user(self, name: str, email: str, **kw) -> dict:
        """A better-auth user row: a random text id (better-auth's generateId is
        32 alphanumerics), created_at / updated_at written by the caller."""
        now = datetime.now(UTC)
        row = {
            "id": uuid.uuid4().hex,
            "name": name,
            "email": email,
            "email_verified": True,
            "created_at": now,
            "updated_at": now,
            **kw,
        }
        return self._insert("user", row)

    # --- plumbing -----------------------------------------------------------------

    def _insert(self, table: str, row: dict) -> dict:
        cols = ", ".join(f'"{c}"' for c in row)
        marks = ", ".join(["%s"] * len(row))
        values = [Jsonb(v) if isinstance(v, dict | list) else v for v in row.values()]
        self.conn.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', values)
        return row

    def update(self, table: str, pk, **changes) -> None:
        """An UPDATE as Paperclip's services write one: updated_at moves too."""
        sets = ", ".join(f'"{k}" = %s' for k in changes)
        values = [Jsonb(v) if isinstance(v, dict | list) else v for v in changes.values()]
        key = "run_id" if table == "work_folder_runs" else "id"
        self.conn.execute(
            f'UPDATE "{table}" SET {sets}, updated_at = clock_timestamp() WHERE "{key}" = %s',
            [*values, pk],
        )

    def metadata(self, lease: dict) -> dict:
        return self.conn.execute(
            "SELECT metadata FROM environment_leases WHERE id = %s", [lease["id"]]
        ).fetchone()[0]

    # --- rows -----------------------------------------------------------------------

    def environment(self, *, driver="sandbox", provider="daytona", **kw) -> dict:
        self._n += 1
        config = {"provider": provider, "reuseLease": True} if provider else {}
        return self._insert(
            "environments",
            {
                "id": uuid.uuid4(),
                "company_id": self.company["id"],
                "name": f"{provider or driver}-{self._n}",
                "driver": driver,
                "status": "active",
                "config": config,
                **kw,
            },
        )

    def issue(self, status="in_progress", **kw) -> dict:
        self._n += 1
        return self._insert(
            "issues",
            {
                "id": uuid.uuid4(),
                "company_id": self.company["id"],
                "identifier": f"PAP-{100 + self._n}",
                "issue_number": 100 + self._n,
                "title": "Fix the flaky export",
                "status": status,
                **kw,
            },
        )

    def workspace(self, issue: dict, **kw) -> dict:
        return self._insert(
            "execution_workspaces",
            {
                "id": uuid.uuid4(),
                "company_id": self.company["id"],
                "source_issue_id": issue["id"],
                "mode": "isolated_workspace",
                "strategy_type": "git_worktree",
                "name": f"workspace for {issue['identifier']}",
                "status": "active",
                "provider_type": "remote_managed",
                **kw,
            },
        )

    def bind(self, issue: dict, workspace: dict) -> None:
        self.update("issues", issue["id"], execution_workspace_id=workspace["id"])

    def run(self, issue: dict | None, status="succeeded", *, native=False, **kw) -> dict:
        """A run names its task in context_snapshot.issueId (legacy runs) or
        native_issue_id (native runs); heartbeat_runs has no issue_id."""
        snapshot = {"issueId": str(issue["id"]), "taskKey": issue["identifier"]} if issue else {}
        live = status in ("queued", "running", "scheduled_retry")
        row = {
            "id": uuid.uuid4(),
            "company_id": self.company["id"],
            "agent_id": self.agent["id"],
            "status": status,
            "runtime_mode": "native" if native else "legacy",
            "context_snapshot": {} if native else snapshot,
            "started_at": ago(hours=3) if status != "queued" else None,
            "finished_at": None if live else ago(hours=2),
            **kw,
        }
        if native:  # an older Paperclip has no native_issue_id column
            row["native_issue_id"] = issue["id"] if issue else None
        return self._insert("heartbeat_runs", row)

    def lease(self, env: dict, issue: dict | None, workspace: dict | None, run: dict, **kw):
        self._n += 1
        provider = kw.pop("provider", (env.get("config") or {}).get("provider") or env["driver"])
        row = {
            "id": uuid.uuid4(),
            "company_id": self.company["id"],
            "environment_id": env["id"],
            "execution_workspace_id": workspace["id"] if workspace else None,
            "issue_id": issue["id"] if issue else None,
            "heartbeat_run_id": run["id"],
            "status": "released",
            "lease_policy": "reuse_by_environment",
            "provider": provider,
            "provider_lease_id": f"{uuid.uuid4()}",
            "acquired_at": ago(hours=3),
            "last_used_at": ago(hours=2),
            "expires_at": None,
            "released_at": ago(hours=2),
            "failure_reason": None,
            "cleanup_status": "success",
        }
        metadata = kw.pop("metadata", None)
        row.update(kw)
        if callable(metadata):
            metadata = metadata(row)
        row["metadata"] = metadata
        return self._insert("environment_leases", row)

    def save(
        self,
        run: dict,
        lease: dict,
        files: dict[str, str],
        *,
        scope="task",
        final=True,
        state="saved",
        **kw,
    ) -> dict:
        """A work-folder run after its final checkpoint (stop(): finalCheckpointAt
        set, state saved). `files` is path → content, saved in `scope`."""
        issue_id = lease["issue_id"]
        manifest = {
            "version": 1,
            "companyId": str(self.company["id"]),
            "runId": str(run["id"]),
            "taskId": str(issue_id) if issue_id else None,
            "agentId": str(self.agent["id"]),
            "responsibleUserId": None,
            "projectId": None,
            "leaseId": str(lease["id"]),
            "sandboxKey": lease["provider_lease_id"],
            "home": "/home/daytona",
            "folders": {"task": str(uuid.uuid4()), "agent": str(uuid.uuid4())}
            | {"user": None, "project": None},
            "repositories": [],
        }
        if final:
            manifest["finalCheckpointAt"] = iso(ago(hours=2))
        baselines = {
            scope: [
                {
                    "path": path,
                    "kind": "file",
                    "byteSize": len(content.encode()),
                    "sha256": sha(content),
                    "executable": False,
                }
                for path, content in files.items()
            ]
        }
        return self._insert(
            "work_folder_runs",
            {
                "run_id": run["id"],
                "company_id": self.company["id"],
                "manifest": manifest,
                "baselines": baselines,
                "pending_operations": {},
                "state": state,
                "last_saved_at": ago(hours=2) if state == "saved" else None,
                **kw,
            },
        )

    def recovery_action(self, issue: dict, leases: list[dict], status="active", **kw) -> dict:
        """legacy-execution-recovery.ts: a restore recovery naming its source leases."""
        evidence = {"runId": str(leases[0]["heartbeat_run_id"])} if leases else {}
        if leases:
            evidence["workspaceRestoreRecovery"] = {
                "schema": RESTORE_SCHEMA,
                "leaseIds": [str(x["id"]) for x in leases],
            }
        return self._insert(
            "issue_recovery_actions",
            {
                "id": uuid.uuid4(),
                "company_id": self.company["id"],
                "source_issue_id": issue["id"],
                "kind": "workspace_restore",
                "status": status,
                "owner_type": "board",
                "cause": "workspace_restore_failed",
                "fingerprint": str(uuid.uuid4()),
                "evidence": evidence,
                "next_action": "Restore the workspace from its retained sandbox",
                "resolved_at": ago(hours=1) if status in ("resolved", "cancelled") else None,
                **kw,
            },
        )

    # --- compound shapes ----------------------------------------------------------

    def task(self, env, *, issue_status="in_progress", run_status="succeeded", **lease_kw):
        """An issue bound to a workspace, a run on it and a lease on that workspace."""
        issue = self.issue(status=issue_status)
        ws = self.workspace(issue)
        self.bind(issue, ws)
        run = self.run(issue, run_status)
        lease = self.lease(env, issue, ws, run, **lease_kw)
        return issue, ws, run, lease

    def retry_to_new_workspace(self, issue: dict) -> dict:
        """A user's Retry on a remote task binds a fresh workspace (seed 001)."""
        fresh = self.workspace(issue)
        self.bind(issue, fresh)
        return fresh

    def prepare_stop(self, lease: dict) -> str:
        """prepareSandboxStopAndRetain: active → pending_cleanup with the intent."""
        request_id = str(uuid.uuid4())
        metadata = {
            k: v
            for k, v in (self.metadata(lease) or {}).items()
            if k not in ("remoteExecutionTermination", "sandboxStopAndRetainReceipt")
        }
        metadata |= {
            "sandboxStopAndRetain": stop_intent(lease, request_id),
            "pendingCleanupAttemptId": request_id,
            "pendingCleanupInFlight": False,
            "pendingCleanupLeaseExpiresAtMs": 0,
            "pendingCleanupRetryAfterMs": 0,
            "pendingCleanupRetryAttempts": 0,
            "pendingCleanupRetryCapWarned": False,
        }
        self.update(
            "environment_leases",
            lease["id"],
            status="pending_cleanup",
            cleanup_status="failed",
            failure_reason="sandbox_stop_pending",
            released_at=ago(seconds=1),
            metadata=metadata,
        )
        return request_id

    def preserve_restore_source(self, lease: dict) -> str:
        """legacy-workspace-restore-recovery.ts preserveLegacyWorkspaceRestoreSources
        on an active lease of a legacy run whose workspace restore failed: the
        stop-only intent first (prepareSandboxStopAndRetain), then lease_policy
        retain_on_failure and metadata.workspaceRestoreRecovery {schema, runId}."""
        request_id = self.prepare_stop(lease)
        marker = {"schema": RESTORE_SCHEMA, "runId": str(lease["heartbeat_run_id"])}
        self.update(
            "environment_leases",
            lease["id"],
            lease_policy="retain_on_failure",
            metadata={**self.metadata(lease), "workspaceRestoreRecovery": marker},
        )
        return request_id

    def settle_stop(self, lease: dict) -> None:
        """settleStopOnlyCleanup with a stopped receipt: the intent key goes, the
        termination and stop-and-retain receipts come, the lease is released."""
        metadata = dict(self.metadata(lease))
        intent = metadata.pop("sandboxStopAndRetain")
        metadata.pop("remoteExecutionTermination", None)
        now = ago(seconds=1)
        metadata |= {
            "remoteExecutionTermination": termination(lease, at=now),
            "sandboxStopAndRetainReceipt": stop_receipt(lease, intent["requestId"], at=now),
            "pendingCleanupInFlight": False,
            "pendingCleanupLeaseExpiresAtMs": 0,
        }
        self.update(
            "environment_leases",
            lease["id"],
            status="released",
            cleanup_status="success",
            failure_reason=None,
            released_at=now,
            last_used_at=now,
            metadata=metadata,
        )
