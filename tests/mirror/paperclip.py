"""A scratch PostgreSQL database standing in for a real Paperclip instance, with
builders that write rows in Paperclip's own shapes (snake_case columns,
camelCase metadata)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from sandboxes.models import RECEIPT_SCHEMAS, ReceiptKind

SCHEMA = Path(__file__).resolve().parents[2] / "sandboxes/mirror/paperclip_schema.sql"
SERVER = "postgresql://postgres@127.0.0.1:5432"
COMPANY = uuid.UUID("00000000-0000-4000-8000-00000000c0de")


def create_database(name: str) -> str:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{SERVER}/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.read_text())
    return dsn


def drop_database(name: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scratch_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def ago(**kwargs) -> datetime:
    return datetime.now(UTC) - timedelta(**kwargs)


def termination(lease: dict, *, state="stopped", run_id=None, **overrides) -> dict:
    return {
        "schema": RECEIPT_SCHEMAS[ReceiptKind.TERMINATION],
        "state": state,
        "runId": str(run_id or lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "providerLeaseId": lease["provider_lease_id"],
        "confirmedAt": ago(hours=1).isoformat(),
        **overrides,
    }


def stop_and_retain_receipt(lease: dict, **overrides) -> dict:
    return {
        "schema": RECEIPT_SCHEMAS[ReceiptKind.STOP_AND_RETAIN],
        "state": "stopped",
        "runId": str(lease["heartbeat_run_id"]),
        "leaseId": str(lease["id"]),
        "providerLeaseId": lease["provider_lease_id"],
        "confirmedAt": ago(hours=1).isoformat(),
        "requestId": f"sar-{lease['id']}",
        **overrides,
    }


class Paperclip:
    """Writes rows into the scratch Paperclip database (a normal, writable connection)."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True)
        self._n = 0

    def close(self):
        self.conn.close()

    def truncate(self):
        self.conn.execute(
            "TRUNCATE environments, issues, execution_workspaces, heartbeat_runs, "
            "environment_leases, issue_recovery_actions, work_folder_runs"
        )

    def _insert(self, table: str, row: dict) -> dict:
        cols = ", ".join(row)
        marks = ", ".join(["%s"] * len(row))
        values = [Jsonb(v) if isinstance(v, dict | list) else v for v in row.values()]
        self.conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", values)
        return row

    def update(self, table: str, pk, **changes) -> None:
        sets = ", ".join(f"{k} = %s" for k in changes)
        values = [Jsonb(v) if isinstance(v, dict | list) else v for v in changes.values()]
        key = "run_id" if table == "work_folder_runs" else "id"
        self.conn.execute(
            f"UPDATE {table} SET {sets}, updated_at = clock_timestamp() WHERE {key} = %s",
            [*values, pk],
        )

    def environment(self, **kw) -> dict:
        self._n += 1
        return self._insert(
            "environments",
            {
                "id": uuid.uuid4(),
                "company_id": COMPANY,
                "name": f"daytona-{self._n}",
                "driver": "sandbox",
                "status": "active",
                "config": {"provider": "daytona", "reuseLease": True},
                **kw,
            },
        )

    def issue(self, **kw) -> dict:
        self._n += 1
        return self._insert(
            "issues",
            {
                "id": uuid.uuid4(),
                "company_id": COMPANY,
                "identifier": f"PAP-{100 + self._n}",
                "title": "Fix the flaky export",
                "status": "in_progress",
                "execution_workspace_id": None,
                **kw,
            },
        )

    def workspace(self, issue: dict, **kw) -> dict:
        return self._insert(
            "execution_workspaces",
            {
                "id": uuid.uuid4(),
                "company_id": COMPANY,
                "issue_id": issue["id"],
                "status": "active",
                "metadata": {"writerRunId": None},
                **kw,
            },
        )

    def bind(self, issue: dict, workspace: dict) -> None:
        self.update("issues", issue["id"], execution_workspace_id=workspace["id"])

    def run(self, issue: dict, status="succeeded", **kw) -> dict:
        return self._insert(
            "heartbeat_runs",
            {
                "id": uuid.uuid4(),
                "company_id": COMPANY,
                "issue_id": issue["id"],
                "status": status,
                "started_at": ago(hours=3),
                "finished_at": ago(hours=2) if status not in ("queued", "running") else None,
                **kw,
            },
        )

    def lease(self, env: dict, issue: dict, workspace: dict, run: dict, **kw) -> dict:
        self._n += 1
        row = {
            "id": uuid.uuid4(),
            "company_id": COMPANY,
            "environment_id": env["id"],
            "execution_workspace_id": workspace["id"],
            "issue_id": issue["id"],
            "heartbeat_run_id": run["id"],
            "status": "released",
            "lease_policy": "reuse_by_environment",
            "provider": "daytona",
            "provider_lease_id": f"sbx-{self._n:05d}-{uuid.uuid4().hex[:6]}",
            "acquired_at": ago(hours=3),
            "last_used_at": ago(hours=2),
            "expires_at": None,
            "released_at": ago(hours=2),
            "failure_reason": None,
            "cleanup_status": None,
            "metadata": {},
        }
        metadata = kw.pop("metadata", None)
        row.update(kw)
        if callable(metadata):
            metadata = metadata(row)
        row["metadata"] = metadata or {}
        return self._insert("environment_leases", row)

    def save(self, run: dict, lease: dict, files: dict, *, state="saved", **kw) -> dict:
        return self._insert(
            "work_folder_runs",
            {
                "run_id": run["id"],
                "state": state,
                "manifest": {
                    "leaseId": str(lease["id"]),
                    "finalCheckpointAt": ago(hours=2).isoformat(),
                    "files": files,
                },
                "last_saved_at": ago(hours=2),
                **kw,
            },
        )

    def recovery_action(self, issue: dict, lease: dict | None, status="active", **kw) -> dict:
        return self._insert(
            "issue_recovery_actions",
            {
                "id": uuid.uuid4(),
                "source_issue_id": issue["id"],
                "kind": "workspace_restore",
                "status": status,
                "outcome": None,
                "evidence": {"leaseId": str(lease["id"])} if lease else {},
                **kw,
            },
        )

    def task(self, env: dict, *, issue_status="in_progress", run_status="succeeded", **lease_kw):
        """An issue bound to a workspace, a run and a lease on that workspace."""
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
