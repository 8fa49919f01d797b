"""Real installations: an older Paperclip lacks tables and columns, a newer one
writes values this console does not know. The mirror checks the catalog
before reading, skips what is missing with a warning in the summary, and
skips, counts and names a row with an unknown value; it never aborts.

Paperclip declares no CHECK constraints on its status-like text columns
(paperclipai/paperclip packages/db/src/schema/environment_leases.ts,
heartbeat_runs.ts, work_folders.ts …), so such values do reach the database.
The stand-in mirror aborted the whole iteration without work_folder_runs.
"""

from io import StringIO

import pytest
from django.core.management import call_command

from sandboxes import models as m
from sandboxes.mirror.sync import mirror_once

from .paperclip import Paperclip, create_database, drop_database, scratch_name, termination

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def older_dsn():
    """An installation from before work_folder_runs and native runs existed."""
    name = scratch_name("paperclip_older_test")
    dsn = create_database(name)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE work_folder_runs")
        conn.execute("ALTER TABLE heartbeat_runs DROP COLUMN native_issue_id")
    yield dsn
    drop_database(name)


@pytest.fixture
def older(older_dsn):
    source = Paperclip(older_dsn)
    source.truncate()
    yield source
    source.close()


def test_a_missing_table_is_skipped_with_a_warning_not_an_abort(older):
    p = older
    env = p.environment()
    issue, _, _, lease = p.task(
        env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
    )
    p.retry_to_new_workspace(issue)
    out = StringIO()
    call_command("mirror_paperclip", "--dsn", p.dsn, stdout=out, stderr=StringIO())
    line = out.getvalue()
    assert "tables missing: work_folder_runs" in line, line
    assert "columns missing: heartbeat_runs.native_issue_id" in line
    # Everything else was mirrored: runs still find their task through context_snapshot.
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.heartbeat_run.issue_id == issue["id"] and not row.placeholder
    assert row.receipts.count() == 1


def test_a_table_without_a_needed_column_is_skipped_too(older):
    import psycopg

    p = older
    p.task(p.environment())
    with psycopg.connect(p.dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE issue_recovery_actions RENAME COLUMN source_issue_id TO issue_ref"
        )
    try:
        report = mirror_once(p.dsn, full=True)
    finally:
        with psycopg.connect(p.dsn, autocommit=True) as conn:
            conn.execute(
                "ALTER TABLE issue_recovery_actions RENAME COLUMN issue_ref TO source_issue_id"
            )
    assert "issue_recovery_actions (no source_issue_id)" in report.tables_missing
    assert m.EnvironmentLease.objects.count() == 1


def test_unknown_values_are_skipped_counted_and_named(paperclip):
    p = paperclip
    env = p.environment()
    _, _, _, good = p.task(env)
    _, _, _, paused = p.task(env, status="paused")  # a lease status from a newer Paperclip
    _, _, _, paused2 = p.task(env, status="paused")
    issue = p.issue(status="archived")
    run = p.run(issue, "waiting_on_human")
    p.environment(driver="kubernetes", provider=None)
    _, _, _, local = p.task(env, provider_lease_id=None)  # never got a sandbox

    out, err = StringIO(), StringIO()
    call_command("mirror_paperclip", "--dsn", p.dsn, stdout=out, stderr=err)
    line = out.getvalue()
    for phrase in (
        "environment_leases: unknown status 'paused' ×2",
        "not a sandbox: 1",
        "environments: unknown driver 'kubernetes' ×1",
        "heartbeat_runs: unknown status 'waiting_on_human' ×1",
        "issues: unknown status 'archived' ×1",
    ):
        assert phrase in line, (phrase, line)
    assert "skipped 5 (" in line  # the lease without a sandbox is not one of them
    for row in (paused, paused2):
        assert str(row["id"]) in err.getvalue()
    assert str(run["id"]) in err.getvalue()
    assert not m.EnvironmentLease.objects.filter(pk__in=[paused["id"], local["id"]]).exists()
    assert m.EnvironmentLease.objects.filter(pk=good["id"], placeholder=False).exists()


def test_an_unreadable_save_is_named_and_the_rest_goes_on(paperclip):
    p = paperclip
    env = p.environment()
    _, _, run, lease = p.task(env)
    _, _, run2, lease2 = p.task(env)
    p.save(run, lease, {"a.txt": "a"})
    save = p.save(run2, lease2, {"b.txt": "b"})
    baselines = {"task": [{"path": "b.txt", "kind": "file", "byteSize": -1, "sha256": None}]}
    p.update("work_folder_runs", run2["id"], baselines=baselines)
    assert save  # written as Paperclip writes it, then broken
    report = mirror_once(p.dsn, full=True)
    assert report.by_reason("skipped") == {
        ("work_folder_runs", "baseline entry is not {sha256, byteSize}"): 1
    }
    ws = m.EnvironmentLease.objects.get(pk=lease["id"]).execution_workspace
    assert ws.save_state == "saved" and "task/a.txt" in ws.saved_manifest


def test_a_lease_without_a_sandbox_is_counted_apart_never_skipped(paperclip):
    """Paperclip writes a local or ssh lease with no provider_lease_id (issue 23):
    that row was read fine, it just names nothing at a provider. Counted as
    "not a sandbox", so "skipped" means only rows the mirror could not read."""
    p = paperclip
    local_env = p.environment(driver="local", provider=None)
    ssh_env = p.environment(driver="ssh", provider=None)
    _, _, _, good = p.task(p.environment())
    _, _, _, local = p.task(local_env, provider_lease_id=None)
    _, _, _, ssh = p.task(ssh_env, provider_lease_id=None)
    _, _, _, paused = p.task(p.environment(), status="paused")  # unreadable: skipped

    out, err = StringIO(), StringIO()
    call_command("mirror_paperclip", "--dsn", p.dsn, "--full", stdout=out, stderr=err)
    line = out.getvalue()
    assert "not a sandbox: 2" in line, line
    assert "skipped 1 (environment_leases: unknown status 'paused' ×1)" in line, line
    # Not a problem row: nothing about them on stderr.
    assert str(local["id"]) not in err.getvalue() and str(ssh["id"]) not in err.getvalue()
    assert str(paused["id"]) in err.getvalue()
    assert not m.EnvironmentLease.objects.filter(pk__in=[local["id"], ssh["id"]]).exists()
    assert m.EnvironmentLease.objects.filter(pk=good["id"], placeholder=False).exists()

    report = mirror_once(p.dsn, full=True)
    counts = report.tables["environment_leases"]
    assert (counts.read, counts.applied, counts.skipped, counts.not_sandbox) == (4, 1, 1, 2)
    assert (report.skipped, report.not_sandbox) == (1, 2)
