"""manage.py mirror_paperclip against Paperclip's real schema: a read-only,
incremental, idempotent mirror reading Paperclip's actual columns and lease
metadata (two PostgreSQL databases: the source built from
sandboxes/mirror/paperclip_schema.sql, and the console's test database).

The shapes are paperclipai/paperclip's: packages/db/src/schema/*.ts for the
columns, server/src/services/{remote-execution-termination,
sandbox-stop-and-retain, native-runtime/native-workspace-export-resume,
sandbox-work-folders, legacy-execution-recovery}.ts for what the metadata and
evidence hold. Each test fails on the stand-in-schema mirror it replaces.
"""

import uuid
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from sandboxes import models as m
from sandboxes.mirror import source
from sandboxes.mirror.sync import follow, mirror_once
from sandboxes.reconciler.listing import evaluate_fleet

from .paperclip import export_resume_marker, sha, termination

pytestmark = pytest.mark.django_db


def mirror(paperclip, *args):
    out, err = StringIO(), StringIO()
    call_command("mirror_paperclip", "--dsn", paperclip.dsn, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def judged():
    """sandbox id → (kind, holds) as the reconciler judges the mirrored fleet."""
    return {
        e.candidate.provider_lease_id: (e.candidate.kind, e.holds)
        for e in evaluate_fleet(now=timezone.now())
    }


def test_a_run_finds_its_task_through_context_snapshot_or_native_issue_id(paperclip):
    """heartbeat_runs has no issue_id (paperclipai/paperclip
    packages/db/src/schema/heartbeat_runs.ts): a legacy run names its task in
    context_snapshot.issueId, a native run in native_issue_id. The stand-in
    read heartbeat_runs.issue_id, so every run lost its task and
    issue_run_active never fired."""
    p = paperclip
    issue = p.issue()
    legacy = p.run(issue, "running")
    native = p.run(issue, "queued", native=True)
    orphan = p.run(None, "succeeded")
    mirror(p)
    assert m.HeartbeatRun.objects.get(pk=legacy["id"]).issue_id == issue["id"]
    assert m.HeartbeatRun.objects.get(pk=native["id"]).issue_id == issue["id"]
    assert m.HeartbeatRun.objects.get(pk=orphan["id"]).issue_id is None


def test_a_live_run_on_the_task_holds_the_sandbox(paperclip):
    p = paperclip
    env = p.environment()
    issue, _, _, lease = p.task(
        env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
    )
    p.retry_to_new_workspace(issue)
    p.run(issue, "running")  # the Retry's run, live on the task
    mirror(p)
    kind, holds = judged()[lease["provider_lease_id"]]
    assert kind == "abandoned_warm" and "issue_run_active" in holds


def test_values_map_one_to_one(paperclip):
    p = paperclip
    env = p.environment()
    issue, ws, run, lease = p.task(
        env,
        issue_status="done",
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row),
            "remoteCwd": "/home/daytona/paperclip/workspace",
            "sandboxLeaseAcquisition": {
                "outcome": "created",
                "providerLeaseId": row["provider_lease_id"],
            },
            "pluginId": None,
        },
    )
    p.save(run, lease, {"README.md": "hello", "src/app.py": "print(1)"})
    out, err = mirror(p)
    assert "skipped 0; quarantined 0; tables missing: none" in out, (out, err)

    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert (row.status, row.lease_policy, row.provider, row.cleanup_status) == (
        "released",
        "reuse_by_environment",
        "daytona",
        "success",
    )
    assert row.provider_lease_id == lease["provider_lease_id"]
    assert row.acquired_at == lease["acquired_at"]
    assert row.metadata["remoteCwd"] == "/home/daytona/paperclip/workspace"
    assert row.metadata["sandboxLeaseAcquisition"]["outcome"] == "created"
    assert not row.placeholder
    assert row.issue.key == issue["identifier"] and row.issue.status == "done"
    # execution_workspaces.source_issue_id is the workspace's task.
    assert row.execution_workspace.issue_id == issue["id"]
    assert row.issue.bound_workspace_id == ws["id"]
    environment = row.environment
    assert (environment.driver, environment.provider, environment.status) == (
        "sandbox",
        "daytona",
        "active",
    )
    assert environment.retirement_mode == "observe"  # a mirrored fleet starts read-only

    receipt = row.receipts.get()
    assert (receipt.kind, receipt.state, receipt.schema) == (
        "termination",
        "stopped",
        "paperclip.remote-termination.v1",
    )
    assert receipt.run_id == run["id"]
    assert receipt.request_id.startswith("mirror:")  # Paperclip's receipt has no request id

    # The durable save: baselines' files under their scope, with the final checkpoint.
    saved = row.execution_workspace
    assert saved.save_state == "saved"
    assert saved.saved_manifest == {
        "task/README.md": {"sha256": sha("hello"), "size": 5},
        "task/src/app.py": {"sha256": sha("print(1)"), "size": 8},
    }
    assert saved.final_checkpoint_at is not None and saved.saved_at is not None


def test_only_a_final_checkpoint_is_a_durable_save(paperclip):
    """work_folder_runs.state is `saved` after every periodic checkpoint too;
    only stop() sets manifest.finalCheckpointAt (sandbox-work-folders)."""
    p = paperclip
    env = p.environment()
    _, _, run, lease = p.task(env)
    p.save(run, lease, {"notes.md": "draft"}, final=False)
    mirror(p)
    ws = m.EnvironmentLease.objects.get(pk=lease["id"]).execution_workspace
    assert (ws.save_state, ws.saved_manifest, ws.final_checkpoint_at) == ("saving", {}, None)

    p.conn.execute(
        "UPDATE work_folder_runs SET manifest = manifest || jsonb_build_object("
        "'finalCheckpointAt', to_char(now() at time zone 'utc', "
        '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')), updated_at = clock_timestamp() WHERE run_id = %s',
        [run["id"]],
    )
    mirror(p)
    ws.refresh_from_db()
    assert ws.save_state == "saved" and ws.saved_manifest == {
        "task/notes.md": {"sha256": sha("draft"), "size": 5}
    }


def test_a_save_finds_its_sandbox_by_sandbox_key_when_the_lease_is_another_row(paperclip):
    """The manifest's leaseId is the run's lease row; sandboxKey names the
    physical sandbox (prepareSandboxWorkFolders: sandboxKey ?? leaseId)."""
    p = paperclip
    env = p.environment()
    _, _, run, lease = p.task(env)
    save = p.save(run, lease, {"a.txt": "a"})
    manifest = {**save["manifest"], "leaseId": str(uuid.uuid4())}
    p.update("work_folder_runs", run["id"], manifest=manifest)
    out, _ = mirror(p)
    ws = m.EnvironmentLease.objects.get(pk=lease["id"]).execution_workspace
    assert ws.saved_manifest == {"task/a.txt": {"sha256": sha("a"), "size": 1}}, out


def test_restore_evidence_names_every_lease(paperclip):
    """evidence.workspaceRestoreRecovery.leaseIds[] (legacy-execution-recovery.ts):
    each named lease gets an action it counts; the stand-in read evidence.leaseId."""
    p = paperclip
    env = p.environment()
    issue, _, _, first = p.task(env, lease_policy="retain_on_failure", run_status="failed")
    run = p.run(issue, "failed")
    second = p.lease(env, issue, None, run, lease_policy="retain_on_failure")
    action = p.recovery_action(issue, [first, second], status="active")
    mirror(p)
    rows = m.RecoveryAction.objects.filter(source_issue_id=issue["id"])
    assert {r.lease_id for r in rows} == {first["id"], second["id"]}
    assert rows.get(lease_id=first["id"]).pk == action["id"]
    assert {r.status for r in rows} == {"active"}
    # Closing the action in Paperclip closes every mirrored row of it.
    p.update("issue_recovery_actions", action["id"], status="resolved", outcome="retried")
    mirror(p)
    assert set(rows.values_list("status", flat=True)) == {"resolved"}


def test_a_pending_stop_holds_and_settles_when_its_key_disappears(paperclip, settings):
    """sandboxStopAndRetain has no state: its presence is the pending stop and
    settleStopOnlyCleanup removes it (sandbox-stop-and-retain.ts). The
    stand-in demanded a state and quarantined every real intent."""
    settings.MIRROR_OVERLAP_SECONDS = 0
    p = paperclip
    env = p.environment()
    issue, _, _, lease = p.task(env, status="active", released_at=None, cleanup_status=None)
    p.retry_to_new_workspace(issue)
    request_id = p.prepare_stop(lease)
    reports = []
    follow(p.dsn, interval=0, max_iterations=1, on_report=reports.append)
    intent = m.LeaseIntent.objects.get(lease_id=lease["id"])
    assert (intent.kind, intent.state, intent.request_id) == (
        "stop_and_retain",
        "pending",
        request_id,
    )
    assert reports[0].problems == []

    p.settle_stop(lease)  # the provider confirmed the stop
    follow(p.dsn, interval=0, max_iterations=1, on_report=reports.append)
    intent.refresh_from_db()
    assert intent.state == "confirmed"
    assert reports[1].settled == 1
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.status == "released"
    assert set(row.receipts.values_list("kind", flat=True)) == {"termination", "stop_and_retain"}
    assert judged()[lease["provider_lease_id"]] == ("abandoned_warm", [])
    # The second iteration read only what changed since the cursor.
    assert reports[1].tables["environment_leases"].read == 1


def test_a_stop_withdrawn_without_a_receipt_is_cancelled(paperclip):
    p = paperclip
    env = p.environment()
    _, _, _, lease = p.task(env, status="active", released_at=None)
    p.prepare_stop(lease)
    mirror(p)
    p.update("environment_leases", lease["id"], metadata={}, status="active")
    mirror(p)
    assert m.LeaseIntent.objects.get(lease_id=lease["id"]).state == "cancelled"


def test_an_export_resume_marker_is_an_export_in_flight(paperclip):
    p = paperclip
    env = p.environment()
    issue, _, _, lease = p.task(
        env,
        metadata=lambda row: {
            "pluginId": "plg-1",
            "remoteExecutionTermination": termination(row),
            "nativeWorkspaceExportResume": export_resume_marker(row, "plg-1"),
        },
    )
    p.retry_to_new_workspace(issue)
    mirror(p)
    export = m.PendingExport.objects.get(lease_id=lease["id"])
    assert export.state == "pending"
    assert "export_pending" in judged()[lease["provider_lease_id"]][1]
    # settleNativeWorkspaceExportResume removes the marker once stopped.
    metadata = p.metadata(lease)
    metadata.pop("nativeWorkspaceExportResume")
    p.update("environment_leases", lease["id"], metadata=metadata)
    mirror(p)
    export.refresh_from_db()
    assert export.state == "done"
    assert judged()[lease["provider_lease_id"]] == ("abandoned_warm", [])


def test_leases_of_every_provider_are_mirrored(paperclip):
    """environment_leases.provider is free text (any provider key); an SSH
    lease's sandbox id is a URL. The stand-in skipped both."""
    p = paperclip
    ssh = p.environment(driver="ssh", provider=None)
    e2b = p.environment(provider="e2b")
    issue, ws, run, lease = p.task(ssh, provider_lease_id="ssh://build-7.internal/srv/work/PAP-1")
    other = p.lease(e2b, issue, ws, run, provider="e2b")
    unnamed = p.lease(e2b, issue, ws, run, provider=None)
    out, _ = mirror(p)
    assert "skipped 0" in out, out
    assert m.Environment.objects.get(pk=ssh["id"]).provider == "ssh"  # driver, no config
    assert m.Environment.objects.get(pk=e2b["id"]).provider == "e2b"  # config.provider
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert (row.provider, row.provider_lease_id) == ("ssh", "ssh://build-7.internal/srv/work/PAP-1")
    assert m.EnvironmentLease.objects.get(pk=other["id"]).provider == "e2b"
    # A lease without a provider is its environment's.
    assert m.EnvironmentLease.objects.get(pk=unnamed["id"]).provider == "e2b"


def test_it_is_idempotent(paperclip):
    p = paperclip
    env = p.environment()
    issue, _, run, lease = p.task(
        env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
    )
    p.recovery_action(issue, [lease], status="resolved")
    p.save(run, lease, {"x": "y"})
    mirror(p)
    counts = {
        model: model.objects.count()
        for model in (m.EnvironmentLease, m.Receipt, m.LeaseIntent, m.RecoveryAction, m.Issue)
    }
    out, _ = mirror(p, "--full")
    assert "0 new receipts" in out
    assert {model: model.objects.count() for model in counts} == counts


def test_console_policy_survives_a_re_mirror(paperclip):
    p = paperclip
    p.task(p.environment())
    mirror(p)
    env = m.Environment.objects.get()
    env.retirement_mode = "auto"
    env.max_retirements_per_pass = 5
    env.save()
    p.update("environments", env.pk, name="renamed")
    mirror(p)
    env.refresh_from_db()
    assert (env.name, env.retirement_mode, env.max_retirements_per_pass) == ("renamed", "auto", 5)


def test_the_cursor_makes_later_runs_incremental(paperclip, cursor_file, settings):
    settings.MIRROR_OVERLAP_SECONDS = 0
    p = paperclip
    env = p.environment()
    leases = [p.task(env)[3] for _ in range(4)]
    first = mirror_once(p.dsn)
    assert cursor_file.exists()
    assert first.tables["environment_leases"].read == 4
    second = mirror_once(p.dsn)
    # Only rows at the cursor's exact timestamp are read again.
    assert second.tables["environment_leases"].read <= 1
    p.update("heartbeat_runs", leases[0]["heartbeat_run_id"], status="failed")
    third = mirror_once(p.dsn)
    assert third.tables["heartbeat_runs"].read >= 1
    # A lost cursor file only costs a full re-read.
    cursor_file.write_text("{not json")
    assert mirror_once(p.dsn).tables["environment_leases"].read == 4


def test_follow_keeps_going_when_an_iteration_fails(paperclip):
    reports, sleeps = [], []
    n = follow(
        "postgresql://postgres@127.0.0.1:1/nowhere",
        interval=0.5,
        max_iterations=2,
        on_report=reports.append,
        sleep=sleeps.append,
    )
    assert n == 2 and reports == [] and sleeps == [0.5]


def test_broken_metadata_is_quarantined_and_named(paperclip):
    p = paperclip
    env = p.environment()
    issue, _, _, unknown = p.task(
        env,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row, schema="paperclip.remote-termination.v9")
        },
    )
    p.retry_to_new_workspace(issue)
    issue, _, _, wrong = p.task(
        env,
        metadata=lambda row: {"remoteExecutionTermination": termination(row, providerLeaseId="x")},
    )
    p.retry_to_new_workspace(issue)
    _, _, _, garbage = p.task(env, status="retained")
    p.conn.execute(
        "UPDATE environment_leases SET metadata = '[1, 2]'::jsonb WHERE id = %s", [garbage["id"]]
    )
    out, err = mirror(p)
    assert "quarantined 3 (environment_leases: metadata is not a JSON object ×1;" in out, out
    assert "remoteExecutionTermination has an unknown schema ×1" in out
    assert "remoteExecutionTermination names another sandbox ×1" in out
    for row in (unknown, wrong, garbage):
        assert str(row["id"]) in err
        lease = m.EnvironmentLease.objects.get(pk=row["id"])
        assert lease.placeholder and not lease.receipts.exists()
        assert row["provider_lease_id"] not in judged()

    # Paperclip fixes the row: the next run mirrors it and un-quarantines it.
    p.update(
        "environment_leases",
        unknown["id"],
        metadata={"remoteExecutionTermination": termination(unknown)},
    )
    mirror(p)
    lease = m.EnvironmentLease.objects.get(pk=unknown["id"])
    assert not lease.placeholder and lease.receipts.count() == 1
    assert judged()[unknown["provider_lease_id"]] == ("abandoned_warm", [])


def test_the_source_connection_is_read_only(paperclip):
    conn = source.connect(paperclip.dsn)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("UPDATE environment_leases SET status = 'expired'")
        conn.rollback()
        conn.autocommit = True  # even outside the session's read-only flag
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM environments")
    finally:
        conn.close()


def test_it_needs_a_dsn(monkeypatch):
    monkeypatch.delenv("PAPERCLIP_DATABASE_URL", raising=False)
    with pytest.raises(CommandError, match="--dsn"):
        call_command("mirror_paperclip", "--dsn", "")


def test_an_unreachable_source_fails_once_cleanly():
    with pytest.raises(CommandError, match="mirror failed"):
        call_command("mirror_paperclip", "--dsn", "postgresql://postgres@127.0.0.1:1/x", "--once")


def test_follow_from_the_command(paperclip):
    p = paperclip
    p.task(p.environment())
    out, _ = mirror(p, "--follow", "--interval", "0", "--max-iterations", "2")
    assert out.count("mirrored ") == 2
    assert m.EnvironmentLease.objects.count() == 1


def test_the_help_names_the_real_columns_and_the_summary(capsys):
    with pytest.raises(SystemExit):
        call_command("mirror_paperclip", "--help")
    text = " ".join(capsys.readouterr().out.split())
    for phrase in (
        "context_snapshot",
        "native_issue_id",
        "source_issue_id",
        "work_folder_runs",
        "finalCheckpointAt",
        "workspaceRestoreRecovery.leaseIds",
        "sandboxStopAndRetain",
        "tables missing",
        "not a sandbox",
        "skipped",
        "quarantined",
    ):
        assert phrase in text, phrase
