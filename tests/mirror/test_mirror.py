"""manage.py mirror_paperclip: a read-only, incremental, idempotent mirror of a
Paperclip database, judged by the reconciler exactly like ingested rows."""

from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from sandboxes import models as m
from sandboxes.mirror import source
from sandboxes.mirror.sync import follow, mirror_once
from sandboxes.reconciler.candidates import judge_leases
from sandboxes.reconciler.holds import compute_holds
from sandboxes.reconciler.listing import evaluate_fleet
from sandboxes.reconciler.preservation import preservation_sources

from .paperclip import ago, stop_and_retain_receipt, termination

pytestmark = pytest.mark.django_db

SHA = "a" * 64


def mirror(paperclip, *args):
    out, err = StringIO(), StringIO()
    call_command("mirror_paperclip", "--dsn", paperclip.dsn, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def decisions():
    """sandbox id → (kind, holds) as the reconciler judges the mirrored fleet."""
    return {
        e.candidate.provider_lease_id: (e.candidate.kind, e.holds)
        for e in evaluate_fleet(now=timezone.now())
    }


@pytest.fixture
def fleet(paperclip):
    """The seed incidents' shapes, in Paperclip's own columns and metadata."""
    p = paperclip
    env = p.environment()
    s = {}

    # seed 001, wave t05: a Retry moved the task to a fresh workspace; the old
    # warm sandbox was released stopped.
    issue, _, _, s["t05"] = p.task(
        env,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row),
            "reusableSandboxLease": {"remoteCwd": "/home/daytona/paperclip/workspace"},
            "sandboxLeaseAcquisition": {"outcome": "created"},
        },
    )
    p.retry_to_new_workspace(issue)

    # seed 001, wave t12: a failed warm lease, sandbox stopped for reuse.
    _, _, _, s["t12"] = p.task(
        env,
        run_status="failed",
        status="failed",
        failure_reason="adapter_failed",
        metadata=lambda row: {"remoteExecutionTermination": termination(row)},
    )

    # seed 001: a warm sandbox kept running whose task moved on.
    issue, _, _, s["superseded"] = p.task(env, status="retained", released_at=None)
    p.retry_to_new_workspace(issue)

    # seed 000: a restore source whose recovery actions a Retry closed.
    issue, _, _, s["restore"] = p.task(
        env,
        run_status="failed",
        status="failed",
        lease_policy="retain_on_failure",
        metadata=lambda row: {"remoteExecutionTermination": termination(row)},
    )
    p.recovery_action(issue, s["restore"], status="resolved", outcome="retried")

    # seed 000: a done task's suspended warm sandbox, past the 24 h retention.
    _, ws, run, s["done"] = p.task(
        env,
        issue_status="done",
        released_at=ago(hours=30),
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row),
            "sandboxStopAndRetain": {"state": "confirmed", "requestId": "stop-1"},
            "sandboxStopAndRetainReceipt": stop_and_retain_receipt(row),
        },
    )
    p.save(run, s["done"], {"README.md": {"sha256": SHA, "size": 7}})

    # seed 002: kept running although its run failed.
    _, _, _, s["kept_running"] = p.task(env, run_status="failed", status="retained")

    # seed 003: a cancelled run's stopped reusable sandbox behind the writer hold.
    issue = p.issue(status="in_progress")
    ws = p.workspace(issue, status="dirty")
    p.bind(issue, ws)
    run = p.run(issue, "cancelled")
    p.update("execution_workspaces", ws["id"], metadata={"writerRunId": str(run["id"])})
    s["preservation"] = p.lease(
        env,
        issue,
        ws,
        run,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row),
            "sandboxStopAndRetainReceipt": stop_and_retain_receipt(row),
        },
    )

    # seed 004: a sandbox that would not resume, replaced from the saved snapshot.
    issue, ws, run, s["resume_failed"] = p.task(
        env,
        status="pending_cleanup",
        failure_reason="resume_failed",
        metadata=lambda row: {"reusableLeaseReplacedByRunId": None},
    )
    next_run = p.run(issue, "running")
    s["replacement"] = p.lease(
        env,
        issue,
        ws,
        next_run,
        status="active",
        released_at=None,
        metadata={"sandboxLeaseAcquisition": {"outcome": "replacement", "reason": "resume_failed"}},
    )
    p.update(
        "environment_leases",
        s["resume_failed"]["id"],
        metadata={"reusableLeaseReplacedByRunId": str(next_run["id"])},
    )
    return s


def test_it_mirrors_the_seed_shapes_and_the_reconciler_judges_them(paperclip, fleet):
    out, err = mirror(paperclip, "--once")
    assert "0 rows skipped and 0 quarantined" in out, (out, err)

    judged = decisions()
    sid = {name: lease["provider_lease_id"] for name, lease in fleet.items()}
    assert judged[sid["t05"]] == ("abandoned_warm", [])
    assert judged[sid["t12"]] == ("abandoned_warm", [])
    assert judged[sid["superseded"]][0] == "superseded_running_warm"
    assert judged[sid["restore"]] == ("closed_restore_source", [])
    assert judged[sid["done"]] == ("done_task_warm", [])
    assert judged[sid["kept_running"]][0] == "stop_after_unsuccessful_run"
    # seed 004: the old lease is a candidate; the issue's replacement run holds it.
    assert judged[sid["resume_failed"]] == ("resume_failed", ["issue_run_active"])
    assert sid["replacement"] not in judged
    # seed 003: not retired (the task resumes there) but a preservation source.
    assert sid["preservation"] not in judged
    lease = m.EnvironmentLease.objects.get(pk=fleet["preservation"]["id"])
    facts = judge_leases([lease.pk])[lease.pk].facts
    holds = compute_holds(facts, None, now=timezone.now())
    assert {"writer_active", "task_can_resume"} <= set(holds)
    assert list(preservation_sources().values_list("pk", flat=True)) == [lease.pk]


def test_values_map_one_to_one(paperclip, fleet):
    mirror(paperclip)
    src = fleet["t05"]
    lease = m.EnvironmentLease.objects.get(pk=src["id"])
    assert (lease.status, lease.lease_policy, lease.provider) == (
        "released",
        "reuse_by_environment",
        "daytona",
    )
    assert lease.provider_lease_id == src["provider_lease_id"]
    assert lease.acquired_at == src["acquired_at"]
    assert lease.metadata["remoteCwd"] == "/home/daytona/paperclip/workspace"
    assert lease.metadata["sandboxLeaseAcquisition"] == {"outcome": "created"}
    assert not lease.placeholder
    assert lease.issue.key.startswith("PAP-")
    assert lease.issue.bound_workspace_id != lease.execution_workspace_id
    env = lease.environment
    assert (env.driver, env.provider, env.status) == ("sandbox", "daytona", "active")
    assert env.retirement_mode == "observe"  # a mirrored fleet starts read-only

    receipt = lease.receipts.get()
    assert (receipt.kind, receipt.state, receipt.schema) == (
        "termination",
        "stopped",
        "paperclip.remote-termination.v1",
    )
    assert receipt.run_id == src["heartbeat_run_id"]
    assert receipt.request_id.startswith("mirror:")

    done = m.EnvironmentLease.objects.get(pk=fleet["done"]["id"])
    assert set(done.receipts.values_list("kind", flat=True)) == {"termination", "stop_and_retain"}
    intent = done.intents.get()
    assert (intent.kind, intent.state, intent.request_id) == (
        "stop_and_retain",
        "confirmed",
        "stop-1",
    )
    ws = done.execution_workspace
    assert ws.save_state == "saved"
    assert ws.saved_manifest == {"README.md": {"sha256": SHA, "size": 7}}
    assert ws.saved_at is not None and ws.final_checkpoint_at is not None

    restore = m.EnvironmentLease.objects.get(pk=fleet["restore"]["id"])
    action = restore.recovery_actions.get()
    assert (action.status, action.outcome, action.kind) == (
        "resolved",
        "retried",
        "workspace_restore",
    )

    writer = m.ExecutionWorkspace.objects.get(pk=fleet["preservation"]["execution_workspace_id"])
    assert writer.writer_run_id == fleet["preservation"]["heartbeat_run_id"]
    assert writer.status == "dirty"
    assert not m.Environment.objects.filter(placeholder=True).exists()
    assert not m.Issue.objects.filter(placeholder=True).exists()


def test_it_is_idempotent(paperclip, fleet):
    mirror(paperclip)
    counts = {
        model: model.objects.count()
        for model in (m.EnvironmentLease, m.Receipt, m.LeaseIntent, m.RecoveryAction, m.Issue)
    }
    out, _ = mirror(paperclip, "--full")
    assert "0 new receipts" in out
    assert {model: model.objects.count() for model in counts} == counts


def test_console_policy_survives_a_re_mirror(paperclip, fleet):
    mirror(paperclip)
    env = m.Environment.objects.get()
    env.retirement_mode = "auto"
    env.max_retirements_per_pass = 5
    env.save()
    paperclip.update("environments", env.pk, name="renamed")
    mirror(paperclip)
    env.refresh_from_db()
    assert (env.name, env.retirement_mode, env.max_retirements_per_pass) == ("renamed", "auto", 5)


def test_follow_picks_up_a_lease_changed_after_the_first_mirror(paperclip, fleet, settings):
    settings.MIRROR_OVERLAP_SECONDS = 0
    reports = []
    follow(paperclip.dsn, interval=0, max_iterations=1, on_report=reports.append)
    sid = fleet["t05"]["provider_lease_id"]
    assert decisions()[sid][0] == "abandoned_warm"

    # Paperclip destroys it itself; the lease row changes.
    paperclip.update(
        "environment_leases", fleet["t05"]["id"], status="expired", cleanup_status="success"
    )
    follow(paperclip.dsn, interval=0, max_iterations=1, on_report=reports.append)
    lease = m.EnvironmentLease.objects.get(pk=fleet["t05"]["id"])
    assert (lease.status, lease.cleanup_status) == ("expired", "success")
    assert sid not in decisions()
    # The second iteration read only what changed since the cursor.
    assert (
        reports[1].tables["environment_leases"].read < reports[0].tables["environment_leases"].read
    )


def test_the_cursor_makes_later_runs_incremental(paperclip, fleet, cursor_file, settings):
    settings.MIRROR_OVERLAP_SECONDS = 0
    first = mirror_once(paperclip.dsn)
    assert cursor_file.exists()
    assert first.tables["environment_leases"].read == len(fleet)
    second = mirror_once(paperclip.dsn)
    # Only rows at the cursor's exact timestamp are read again.
    assert second.tables["environment_leases"].read <= 1
    paperclip.update("heartbeat_runs", fleet["t05"]["heartbeat_run_id"], status="succeeded")
    third = mirror_once(paperclip.dsn)
    assert third.tables["heartbeat_runs"].read >= 1
    # A lost cursor file only costs a full re-read.
    cursor_file.write_text("{not json")
    assert mirror_once(paperclip.dsn).tables["environment_leases"].read == len(fleet)


def test_follow_keeps_going_when_an_iteration_fails(paperclip, fleet):
    reports, sleeps = [], []
    n = follow(
        "postgresql://postgres@127.0.0.1:1/nowhere",
        interval=0.5,
        max_iterations=2,
        on_report=reports.append,
        sleep=sleeps.append,
    )
    assert n == 2 and reports == [] and sleeps == [0.5]


def test_broken_metadata_is_reported_and_skipped(paperclip, fleet):
    p = paperclip
    env = p.environment()
    # A receipt in a schema the console does not know: the lease is mirrored
    # (its status counts for other rows' holds) but quarantined.
    issue, _, _, unknown = p.task(
        env,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(
                row, schema="paperclip.remote-termination.v9"
            ),
        },
    )
    p.retry_to_new_workspace(issue)
    # A receipt that names another sandbox.
    issue, _, _, wrong = p.task(
        env,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row, providerLeaseId="sbx-someone-else"),
        },
    )
    p.retry_to_new_workspace(issue)
    # Metadata that is not an object at all, and a status Paperclip never writes.
    issue, _, _, garbage = p.task(env, status="retained")
    p.conn.execute(
        "UPDATE environment_leases SET metadata = '[1, 2]'::jsonb WHERE id = %s", [garbage["id"]]
    )
    _, _, _, zombie = p.task(env, status="zombie")
    # A save whose manifest is not {sha256, size}.
    issue, _, run, saved = p.task(env)
    p.save(run, saved, {"a.txt": {"sha256": "nope", "size": -1}})

    out, err = mirror(p)
    assert "2 rows skipped and 3 quarantined" in out
    for row in (unknown, wrong, garbage, zombie):
        assert str(row["id"]) in err
    assert "unknown schema 'paperclip.remote-termination.v9'" in err
    assert "names another sandbox" in err
    assert "unknown status 'zombie'" in err
    assert "manifest.files['a.txt']" in err

    for row in (unknown, wrong, garbage):
        lease = m.EnvironmentLease.objects.get(pk=row["id"])
        assert lease.placeholder and not lease.receipts.exists()
    assert not m.EnvironmentLease.objects.filter(pk=zombie["id"]).exists()
    judged = decisions()
    for row in (unknown, wrong, garbage, zombie):
        assert row["provider_lease_id"] not in judged
    # Everything else was mirrored and judged as before.
    assert judged[fleet["t05"]["provider_lease_id"]] == ("abandoned_warm", [])

    # Paperclip fixes the row: the next run mirrors it and un-quarantines it.
    p.update(
        "environment_leases",
        unknown["id"],
        metadata={
            "remoteExecutionTermination": termination(unknown),
        },
    )
    mirror(p)
    lease = m.EnvironmentLease.objects.get(pk=unknown["id"])
    assert not lease.placeholder and lease.receipts.count() == 1
    assert decisions()[unknown["provider_lease_id"]] == ("abandoned_warm", [])


def test_the_source_connection_is_read_only(paperclip, fleet):
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


def test_follow_from_the_command(paperclip, fleet):
    out, _ = mirror(paperclip, "--follow", "--interval", "0", "--max-iterations", "2")
    assert out.count("mirrored ") == 2
    assert m.EnvironmentLease.objects.count() == len(fleet)
