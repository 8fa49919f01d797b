-- Paperclip's own schema for the ten tables manage.py mirror_paperclip reads,
-- plus the minimal parents their foreign keys need. Rebuilt from
-- paperclipai/paperclip (the judge, not this file):
--
--   packages/db/src/schema/environment_leases.ts   and the migration that
--       creates "environments" and "environment_leases" (drizzle output; the
--       same DDL as scripts/ops hotfix-environments-schema.sql)
--   packages/db/src/schema/heartbeat_runs.ts
--   packages/db/src/schema/execution_workspaces.ts
--   packages/db/src/schema/issues.ts                (at 0016414f4eeee8f3e04defc862ffafd960b4f614)
--   packages/db/src/schema/issue_recovery_actions.ts
--   packages/db/src/schema/work_folders.ts          (work_folder_runs)
--   packages/db/src/schema/companies.ts             (at 23474e298f38df4b4c775c5edea26995a32eb47f)
--   packages/db/src/schema/agents.ts                (at 39437f4e6250cb91fadbc05b255b4b1b477fa9a7)
--   packages/db/src/schema/auth.ts                  (at fd77e0d27b52aad4fd52e4a5ca1c87b7bfcafd10:
--       better-auth's "user"; its session, account and verification tables
--       hold no person's name or address and are left out)
--
-- Column names, types, nullability and defaults are Paperclip's. Paperclip
-- declares NO CHECK constraints on its status-like text columns (status,
-- lease_policy, cleanup_status, driver, state…): a newer Paperclip may write a
-- value this console does not know, and the mirror must skip, count and name
-- such a row rather than abort. So this file adds no CHECKs either.
--
-- ADAPTATIONS (each kept minimal, each marked ADAPTED below):
--   * Columns that reference tables the mirror never reads (projects, goals,
--     teams, project_workspaces, agent_wakeup_requests, …) keep their column
--     and type but drop the FOREIGN KEY, so those tables need not exist.
--   * heartbeat_runs carries the columns the mirror reads and those NOT NULL
--     without a default; the ~60 others (logs, liveness, process fields…) are
--     nullable or defaulted and play no part in mirroring.
--   * issues' trigram search indexes (gin_trgm_ops) are left out: they need
--     the pg_trgm extension and index text the mirror never searches.
--   * gen_random_uuid() is core PostgreSQL since 13; no extension is needed.
--
-- Users are better-auth's: "user".id is text (not a uuid), and issues name a
-- user in assignee_user_id / created_by_user_id, text columns WITHOUT a
-- foreign key (an issue may name a user id no "user" row holds).

CREATE TABLE "companies" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "name" text NOT NULL,
    "description" text,
    "status" text DEFAULT 'active' NOT NULL,
    "pause_reason" text,
    "paused_at" timestamp with time zone,
    "issue_prefix" text DEFAULT 'PAP' NOT NULL,
    "issue_counter" integer DEFAULT 0 NOT NULL,
    "budget_monthly_cents" integer DEFAULT 0 NOT NULL,
    "spent_monthly_cents" integer DEFAULT 0 NOT NULL,
    "require_board_approval_for_new_agents" boolean DEFAULT true NOT NULL,
    "require_proof_document_on_close" boolean DEFAULT false NOT NULL,
    "feedback_data_sharing_enabled" boolean DEFAULT false NOT NULL,
    "feedback_data_sharing_consent_at" timestamp with time zone,
    "feedback_data_sharing_consent_by_user_id" text,
    "feedback_data_sharing_terms_version" text,
    "brand_color" text,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "agents" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL REFERENCES "companies"("id"),
    "name" text NOT NULL,
    "role" text DEFAULT 'general' NOT NULL,
    "title" text,
    "icon" text,
    "status" text DEFAULT 'idle' NOT NULL,
    "reports_to" uuid REFERENCES "agents"("id"),
    "capabilities" text,
    "template" text,
    "adapter_type" text DEFAULT 'process' NOT NULL,
    "adapter_config" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "runtime_config" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "budget_monthly_cents" integer DEFAULT 0 NOT NULL,
    "spent_monthly_cents" integer DEFAULT 0 NOT NULL,
    "permissions" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "last_heartbeat_at" timestamp with time zone,
    "metadata" jsonb,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

-- better-auth's user table (auth.ts authUsers): its timestamps have no default.
CREATE TABLE "user" (
    "id" text PRIMARY KEY NOT NULL,
    "name" text NOT NULL,
    "email" text NOT NULL,
    "email_verified" boolean DEFAULT false NOT NULL,
    "image" text,
    "created_at" timestamp with time zone NOT NULL,
    "updated_at" timestamp with time zone NOT NULL
);

CREATE TABLE "environments" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "name" text NOT NULL,
    "description" text,
    "driver" text DEFAULT 'local' NOT NULL,
    "status" text DEFAULT 'active' NOT NULL,
    "config" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "metadata" jsonb,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "issues" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "team_id" uuid,                                        -- ADAPTED: FK to teams dropped
    "project_id" uuid,                                     -- ADAPTED: FK to projects dropped
    "project_workspace_id" uuid,                           -- ADAPTED: FK dropped
    "goal_id" uuid,                                        -- ADAPTED: FK to goals dropped
    "parent_id" uuid,
    "title" text NOT NULL,
    "description" text,
    "status" text DEFAULT 'backlog' NOT NULL,
    "priority" text DEFAULT 'medium' NOT NULL,
    "assignee_agent_id" uuid,
    "assignee_user_id" text,
    "checkout_run_id" uuid,
    "execution_run_id" uuid,
    "execution_agent_name_key" text,
    "execution_locked_at" timestamp with time zone,
    "created_by_agent_id" uuid,
    "created_by_user_id" text,
    "issue_number" integer,
    "identifier" text,
    "estimate" integer,
    "origin_kind" text DEFAULT 'manual' NOT NULL,
    "origin_id" text,
    "origin_run_id" text,
    "request_depth" integer DEFAULT 0 NOT NULL,
    "billing_code" text,
    "assignee_adapter_overrides" jsonb,
    "execution_policy" jsonb,
    "execution_state" jsonb,
    "execution_workspace_id" uuid,
    "execution_workspace_preference" text,
    "execution_workspace_settings" jsonb,
    "started_at" timestamp with time zone,
    "completed_at" timestamp with time zone,
    "cancelled_at" timestamp with time zone,
    "hidden_at" timestamp with time zone,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "execution_workspaces" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "project_id" uuid,                                     -- ADAPTED: FK to projects dropped
    "project_workspace_id" uuid,                           -- ADAPTED: FK dropped
    "source_issue_id" uuid,
    "mode" text NOT NULL,
    "strategy_type" text NOT NULL,
    "name" text NOT NULL,
    "status" text DEFAULT 'active' NOT NULL,
    "cwd" text,
    "repo_url" text,
    "base_ref" text,
    "branch_name" text,
    "provider_type" text DEFAULT 'local_fs' NOT NULL,
    "provider_ref" text,
    "derived_from_execution_workspace_id" uuid,
    "last_used_at" timestamp with time zone DEFAULT now() NOT NULL,
    "opened_at" timestamp with time zone DEFAULT now() NOT NULL,
    "closed_at" timestamp with time zone,
    "cleanup_eligible_at" timestamp with time zone,
    "cleanup_reason" text,
    "metadata" jsonb,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "heartbeat_runs" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "agent_id" uuid NOT NULL,
    "invocation_source" text DEFAULT 'on_demand' NOT NULL,
    "trigger_detail" text,
    "status" text DEFAULT 'queued' NOT NULL,
    "responsible_user_id" text,
    "started_at" timestamp with time zone,
    "finished_at" timestamp with time zone,
    "error" text,
    "wakeup_request_id" uuid,                              -- ADAPTED: FK dropped
    "exit_code" integer,
    "result_json" jsonb,
    "runtime_mode" text DEFAULT 'legacy' NOT NULL,
    -- The run's task on native runs; Paperclip reads a run's task as
    -- coalesce(native_issue_id::text, context_snapshot->>'issueId')
    -- (server/src/services legacy-execution-recovery, heartbeat_runs indexes).
    "native_issue_id" uuid,
    "error_code" text,
    "retry_of_run_id" uuid,
    "scheduled_retry_at" timestamp with time zone,
    "context_snapshot" jsonb,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "environment_leases" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "environment_id" uuid NOT NULL,
    "execution_workspace_id" uuid,
    "issue_id" uuid,
    "heartbeat_run_id" uuid,
    "status" text DEFAULT 'active' NOT NULL,
    "lease_policy" text DEFAULT 'ephemeral' NOT NULL,
    "provider" text,
    "provider_lease_id" text,
    "acquired_at" timestamp with time zone DEFAULT now() NOT NULL,
    "last_used_at" timestamp with time zone DEFAULT now() NOT NULL,
    "expires_at" timestamp with time zone,
    "released_at" timestamp with time zone,
    "failure_reason" text,
    "cleanup_status" text,
    "metadata" jsonb,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE "issue_recovery_actions" (
    "id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
    "company_id" uuid NOT NULL,
    "source_issue_id" uuid NOT NULL,
    "recovery_issue_id" uuid,
    "kind" text NOT NULL,
    "status" text DEFAULT 'active' NOT NULL,
    "owner_type" text DEFAULT 'agent' NOT NULL,
    "owner_agent_id" uuid,
    "owner_user_id" text,
    "previous_owner_agent_id" uuid,
    "return_owner_agent_id" uuid,
    "cause" text NOT NULL,
    "fingerprint" text NOT NULL,
    "evidence" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "next_action" text NOT NULL,
    "wake_policy" jsonb,
    "monitor_policy" jsonb,
    "attempt_count" integer DEFAULT 0 NOT NULL,
    "max_attempts" integer,
    "stale" boolean DEFAULT false NOT NULL,
    "timeout_at" timestamp with time zone,
    "last_attempt_at" timestamp with time zone,
    "outcome" text,
    "resolution_note" text,
    "resolved_at" timestamp with time zone,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

-- A run's work-folder sync state: its manifest ({version, companyId, runId,
-- taskId, agentId, …, leaseId, sandboxKey, home, finalCheckpointAt?, folders,
-- repositories}) and, per scope, the baseline of files last saved
-- ({path, kind, byteSize, sha256, executable}). No created_at: Paperclip's
-- table has none.
CREATE TABLE "work_folder_runs" (
    "run_id" uuid PRIMARY KEY NOT NULL,
    "company_id" uuid NOT NULL,
    "manifest" jsonb NOT NULL,
    "baselines" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "pending_operations" jsonb DEFAULT '{}'::jsonb NOT NULL,
    "state" text DEFAULT 'starting' NOT NULL,
    "last_saved_at" timestamp with time zone,
    "error" text,
    "refresh_requested" boolean DEFAULT false NOT NULL,
    "updated_at" timestamp with time zone DEFAULT now() NOT NULL
);

-- Foreign keys among the mirrored tables, as Paperclip declares them.
ALTER TABLE "environments" ADD CONSTRAINT "environments_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id") ON DELETE cascade;
ALTER TABLE "issues" ADD CONSTRAINT "issues_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id");
ALTER TABLE "issues" ADD CONSTRAINT "issues_parent_id_issues_id_fk"
    FOREIGN KEY ("parent_id") REFERENCES "issues"("id");
ALTER TABLE "issues" ADD CONSTRAINT "issues_assignee_agent_id_agents_id_fk"
    FOREIGN KEY ("assignee_agent_id") REFERENCES "agents"("id");
ALTER TABLE "issues" ADD CONSTRAINT "issues_created_by_agent_id_agents_id_fk"
    FOREIGN KEY ("created_by_agent_id") REFERENCES "agents"("id");
ALTER TABLE "issues" ADD CONSTRAINT "issues_checkout_run_id_heartbeat_runs_id_fk"
    FOREIGN KEY ("checkout_run_id") REFERENCES "heartbeat_runs"("id") ON DELETE set null;
ALTER TABLE "issues" ADD CONSTRAINT "issues_execution_run_id_heartbeat_runs_id_fk"
    FOREIGN KEY ("execution_run_id") REFERENCES "heartbeat_runs"("id") ON DELETE set null;
ALTER TABLE "issues" ADD CONSTRAINT "issues_execution_workspace_id_execution_workspaces_id_fk"
    FOREIGN KEY ("execution_workspace_id") REFERENCES "execution_workspaces"("id") ON DELETE set null;
ALTER TABLE "execution_workspaces" ADD CONSTRAINT "execution_workspaces_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id") ON DELETE cascade;
ALTER TABLE "execution_workspaces" ADD CONSTRAINT "execution_workspaces_source_issue_id_issues_id_fk"
    FOREIGN KEY ("source_issue_id") REFERENCES "issues"("id") ON DELETE set null;
ALTER TABLE "execution_workspaces" ADD CONSTRAINT "execution_workspaces_derived_from_fk"
    FOREIGN KEY ("derived_from_execution_workspace_id") REFERENCES "execution_workspaces"("id") ON DELETE set null;
ALTER TABLE "heartbeat_runs" ADD CONSTRAINT "heartbeat_runs_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id");
ALTER TABLE "heartbeat_runs" ADD CONSTRAINT "heartbeat_runs_agent_id_agents_id_fk"
    FOREIGN KEY ("agent_id") REFERENCES "agents"("id");
ALTER TABLE "heartbeat_runs" ADD CONSTRAINT "heartbeat_runs_retry_of_run_id_fk"
    FOREIGN KEY ("retry_of_run_id") REFERENCES "heartbeat_runs"("id") ON DELETE set null;
ALTER TABLE "environment_leases" ADD CONSTRAINT "environment_leases_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id") ON DELETE cascade;
ALTER TABLE "environment_leases" ADD CONSTRAINT "environment_leases_environment_id_environments_id_fk"
    FOREIGN KEY ("environment_id") REFERENCES "environments"("id") ON DELETE cascade;
ALTER TABLE "environment_leases" ADD CONSTRAINT "environment_leases_execution_workspace_id_execution_workspaces_id_fk"
    FOREIGN KEY ("execution_workspace_id") REFERENCES "execution_workspaces"("id") ON DELETE set null;
ALTER TABLE "environment_leases" ADD CONSTRAINT "environment_leases_issue_id_issues_id_fk"
    FOREIGN KEY ("issue_id") REFERENCES "issues"("id") ON DELETE set null;
ALTER TABLE "environment_leases" ADD CONSTRAINT "environment_leases_heartbeat_run_id_heartbeat_runs_id_fk"
    FOREIGN KEY ("heartbeat_run_id") REFERENCES "heartbeat_runs"("id") ON DELETE set null;
ALTER TABLE "issue_recovery_actions" ADD CONSTRAINT "issue_recovery_actions_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id");
ALTER TABLE "issue_recovery_actions" ADD CONSTRAINT "issue_recovery_actions_source_issue_id_issues_id_fk"
    FOREIGN KEY ("source_issue_id") REFERENCES "issues"("id") ON DELETE cascade;
ALTER TABLE "issue_recovery_actions" ADD CONSTRAINT "issue_recovery_actions_recovery_issue_id_issues_id_fk"
    FOREIGN KEY ("recovery_issue_id") REFERENCES "issues"("id") ON DELETE set null;
ALTER TABLE "work_folder_runs" ADD CONSTRAINT "work_folder_runs_run_id_heartbeat_runs_id_fk"
    FOREIGN KEY ("run_id") REFERENCES "heartbeat_runs"("id") ON DELETE cascade;
ALTER TABLE "work_folder_runs" ADD CONSTRAINT "work_folder_runs_company_id_companies_id_fk"
    FOREIGN KEY ("company_id") REFERENCES "companies"("id") ON DELETE cascade;

-- Paperclip's own indexes on these tables (none is on updated_at except the
-- ones marked: the mirror must not assume an index it cannot create).
CREATE INDEX "environments_company_status_idx" ON "environments" USING btree ("company_id","status");
CREATE INDEX "environments_company_name_idx" ON "environments" USING btree ("company_id","name");
CREATE UNIQUE INDEX "environments_company_driver_idx" ON "environments" USING btree ("company_id","driver")
    WHERE "driver" = 'local';
CREATE UNIQUE INDEX "companies_issue_prefix_idx" ON "companies" USING btree ("issue_prefix");
CREATE INDEX "agents_company_status_idx" ON "agents" USING btree ("company_id","status");
CREATE INDEX "agents_company_reports_to_idx" ON "agents" USING btree ("company_id","reports_to");
CREATE INDEX "issues_company_status_idx" ON "issues" USING btree ("company_id","status");
CREATE INDEX "issues_company_assignee_status_idx" ON "issues" USING btree ("company_id","assignee_agent_id","status");
CREATE INDEX "issues_company_assignee_user_status_idx" ON "issues" USING btree ("company_id","assignee_user_id","status");
CREATE INDEX "issues_company_execution_workspace_idx" ON "issues" USING btree ("company_id","execution_workspace_id");
CREATE UNIQUE INDEX "issues_identifier_idx" ON "issues" USING btree ("identifier");
CREATE INDEX "execution_workspaces_company_source_issue_idx" ON "execution_workspaces" USING btree ("company_id","source_issue_id");
CREATE INDEX "execution_workspaces_company_last_used_idx" ON "execution_workspaces" USING btree ("company_id","last_used_at");
CREATE INDEX "heartbeat_runs_company_agent_started_idx" ON "heartbeat_runs" USING btree ("company_id","agent_id","started_at");
CREATE INDEX "heartbeat_runs_company_ctx_issue_created_idx" ON "heartbeat_runs" USING btree ("company_id",("context_snapshot" ->> 'issueId'),"created_at" DESC);
CREATE INDEX "environment_leases_company_environment_status_idx" ON "environment_leases" USING btree ("company_id","environment_id","status");
CREATE INDEX "environment_leases_company_execution_workspace_idx" ON "environment_leases" USING btree ("company_id","execution_workspace_id");
CREATE INDEX "environment_leases_company_issue_idx" ON "environment_leases" USING btree ("company_id","issue_id");
CREATE INDEX "environment_leases_heartbeat_run_idx" ON "environment_leases" USING btree ("heartbeat_run_id");
CREATE INDEX "environment_leases_company_last_used_idx" ON "environment_leases" USING btree ("company_id","last_used_at");
CREATE INDEX "environment_leases_provider_lease_idx" ON "environment_leases" USING btree ("provider_lease_id");
CREATE UNIQUE INDEX "environment_leases_active_workspace_singleflight_idx" ON "environment_leases" USING btree ("environment_id","execution_workspace_id")
    WHERE "status" = 'active' and "execution_workspace_id" is not null and "lease_policy" = 'ephemeral';
CREATE INDEX "issue_recovery_actions_company_source_status_idx" ON "issue_recovery_actions" USING btree ("company_id","source_issue_id","status");
CREATE UNIQUE INDEX "issue_recovery_actions_active_source_uq" ON "issue_recovery_actions" USING btree ("company_id","source_issue_id")
    WHERE "status" in ('active', 'escalated');
CREATE INDEX "work_folder_runs_company_idx" ON "work_folder_runs" USING btree ("company_id");
