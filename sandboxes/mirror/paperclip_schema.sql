-- The part of Paperclip's schema the mirror reads (manage.py mirror_paperclip).
-- Column names and values are Paperclip's own; the mirror only ever SELECTs
-- them, over a read-only connection. Tests create these tables in a scratch
-- database to stand in for a real Paperclip instance.

CREATE TABLE environments (
    id uuid PRIMARY KEY,
    company_id uuid NOT NULL,
    name text NOT NULL,
    driver text NOT NULL,              -- local, ssh, sandbox, plugin
    status text NOT NULL,              -- active, archived
    config jsonb NOT NULL DEFAULT '{}', -- {"provider": "daytona", ...}
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE issues (
    id uuid PRIMARY KEY,
    company_id uuid NOT NULL,
    identifier text,                    -- PAP-142
    title text NOT NULL DEFAULT '',
    status text NOT NULL,               -- backlog … cancelled
    execution_workspace_id uuid,        -- the workspace the task is bound to now
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE execution_workspaces (
    id uuid PRIMARY KEY,
    company_id uuid NOT NULL,
    issue_id uuid,
    status text NOT NULL,               -- active, dirty, …
    metadata jsonb NOT NULL DEFAULT '{}', -- {"writerRunId": uuid | null}
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE heartbeat_runs (
    id uuid PRIMARY KEY,
    company_id uuid NOT NULL,
    issue_id uuid,
    status text NOT NULL,               -- queued … timed_out
    started_at timestamptz,
    finished_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE environment_leases (
    id uuid PRIMARY KEY,
    company_id uuid NOT NULL,
    environment_id uuid NOT NULL,
    execution_workspace_id uuid,
    issue_id uuid,
    heartbeat_run_id uuid,
    status text NOT NULL,               -- active, released, expired, failed, retained, pending_cleanup
    lease_policy text NOT NULL,         -- ephemeral, reuse_by_environment, …
    provider text NOT NULL,
    provider_lease_id text,
    acquired_at timestamptz,
    last_used_at timestamptz,
    expires_at timestamptz,
    released_at timestamptz,
    failure_reason text,
    cleanup_status text,
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE issue_recovery_actions (
    id uuid PRIMARY KEY,
    source_issue_id uuid NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,               -- active, escalated, resolved, cancelled
    outcome text,
    evidence jsonb NOT NULL DEFAULT '{}', -- {"leaseId": uuid, …}
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A run's durable save of its work folder: the workspace's last committed save.
CREATE TABLE work_folder_runs (
    run_id uuid PRIMARY KEY,
    state text NOT NULL,                -- starting, saving, saved, failed
    manifest jsonb NOT NULL DEFAULT '{}', -- {"leaseId", "finalCheckpointAt", "files": {path: {sha256, size}}}
    last_saved_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX environments_updated_at ON environments (updated_at, id);
CREATE INDEX issues_updated_at ON issues (updated_at, id);
CREATE INDEX execution_workspaces_updated_at ON execution_workspaces (updated_at, id);
CREATE INDEX heartbeat_runs_updated_at ON heartbeat_runs (updated_at, id);
CREATE INDEX environment_leases_updated_at ON environment_leases (updated_at, id);
CREATE INDEX issue_recovery_actions_updated_at ON issue_recovery_actions (updated_at, id);
CREATE INDEX work_folder_runs_updated_at ON work_folder_runs (updated_at, run_id);
