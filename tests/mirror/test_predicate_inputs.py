"""What Paperclip's own proof predicates read, mirrored as Paperclip wrote it
(docs/rules.md, proof): every row's company_id, each receipt's own companyId
and its Paperclip keys as written, a stop-and-retain receipt without a
request id kept but marked, and the restore-source marker
(metadata.workspaceRestoreRecovery) that legacy-workspace-restore-recovery.ts
preserveLegacyWorkspaceRestoreSources writes.

Receipts are as paperclipai/paperclip writes them: remote-execution-termination.ts
remoteTerminationReceipt and sandbox-stop-and-retain.ts settleStopOnlyCleanup
at c5df623 (tests/mirror/paperclip.py)."""

import uuid
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command

from sandboxes import models as m
from sandboxes.mirror.sync import mirror_once

from .paperclip import (
    RESTORE_SCHEMA,
    Paperclip,
    create_database,
    drop_database,
    export_resume_marker,
    scratch_name,
    stop_receipt,
    termination,
)

pytestmark = pytest.mark.django_db

MIRRORED_TABLES = (
    "environments",
    "issues",
    "execution_workspaces",
    "heartbeat_runs",
    "environment_leases",
    "issue_recovery_actions",
)


def mirror(p) -> str:
    out = StringIO()
    call_command("mirror_paperclip", "--dsn", p.dsn, "--full", stdout=out, stderr=StringIO())
    return out.getvalue()


def company_fleet(p) -> dict:
    """A task of the current company with every kind of row the mirror writes:
    a stopped sandbox with both receipts, a stop in flight, an export in flight
    and a restore recovery naming the first."""
    env = p.environment()
    issue, ws, run, lease = p.task(
        env, run_status="failed", status="active", released_at=None, cleanup_status=None
    )
    p.prepare_stop(lease)
    p.settle_stop(lease)
    _, _, _, stopping = p.task(env, status="active", released_at=None, cleanup_status=None)
    p.prepare_stop(stopping)
    _, _, _, exporting = p.task(
        env,
        status="retained",
        metadata=lambda row: {"nativeWorkspaceExportResume": export_resume_marker(row, "e2b")},
    )
    second = p.lease(env, issue, None, p.run(issue, "failed"), lease_policy="retain_on_failure")
    action = p.recovery_action(issue, [lease, second])
    return {
        "company": p.company["id"],
        "env": env,
        "issue": issue,
        "ws": ws,
        "run": run,
        "leases": [lease, stopping, exporting, second],
        "action": action,
    }


def test_every_mirrored_row_carries_its_own_company(paperclip):
    """company_id is NOT NULL on every table the mirror reads
    (packages/db/src/schema/*.ts); Paperclip's predicates bind receipts to it.
    Two companies, so a row cannot get it from anywhere but itself."""
    p = paperclip
    first = company_fleet(p)
    p.switch_company("Globex")
    second = company_fleet(p)
    out = mirror(p)
    assert "skipped 0; quarantined 0" in out, out

    for fleet in (first, second):
        company = fleet["company"]
        assert m.Environment.objects.get(pk=fleet["env"]["id"]).company_id == company
        assert m.Issue.objects.get(pk=fleet["issue"]["id"]).company_id == company
        assert m.ExecutionWorkspace.objects.get(pk=fleet["ws"]["id"]).company_id == company
        assert m.HeartbeatRun.objects.get(pk=fleet["run"]["id"]).company_id == company
        ids = [lease["id"] for lease in fleet["leases"]]
        leases = m.EnvironmentLease.objects.filter(pk__in=ids)
        assert {lease.company_id for lease in leases} == {company} and leases.count() == 4
        # Both rows of the action (one per lease it names) are its company's.
        actions = m.RecoveryAction.objects.filter(source_issue_id=fleet["issue"]["id"])
        assert actions.count() == 2 and {a.company_id for a in actions} == {company}
        # Intents and exports are the lease's; receipts name their own.
        intents = m.LeaseIntent.objects.filter(lease_id__in=ids)
        exports = m.PendingExport.objects.filter(lease_id__in=ids)
        receipts = m.Receipt.objects.filter(lease_id__in=ids)
        assert intents.count() == 1 and intents.get().company_id == company
        assert exports.count() == 1 and exports.get().company_id == company
        assert receipts.count() == 2 and {r.company_id for r in receipts} == {company}


def test_a_receipt_keeps_its_own_company_and_paperclips_keys(paperclip):
    """hasConfirmedSandboxStopAndRetain compares receipt.companyId with the
    lease's, and reads provider, providerLeaseId, builtinProvider, method,
    pluginId, requestId and confirmedAt (the original string): all kept."""
    p = paperclip
    env = p.environment()
    _, _, _, lease = p.task(env, status="active", released_at=None, cleanup_status=None)
    request_id = p.prepare_stop(lease)
    p.settle_stop(lease)
    written = p.metadata(lease)
    mirror(p)
    stop = m.Receipt.objects.get(lease_id=lease["id"], kind="stop_and_retain")
    assert stop.company_id == p.company["id"] and stop.request_id == request_id
    paperclip_keys = written["sandboxStopAndRetainReceipt"]
    assert {k: stop.payload[k] for k in paperclip_keys} == paperclip_keys
    assert stop.payload["confirmedAt"] == written["remoteExecutionTermination"]["confirmedAt"]
    assert "requestIdMissing" not in stop.payload
    end = m.Receipt.objects.get(lease_id=lease["id"], kind="termination")
    assert end.company_id == p.company["id"]
    assert "requestIdMissing" not in end.payload  # Paperclip's termination has no request id


@pytest.mark.parametrize(
    "company",
    [None, "not-a-uuid", 42, "", "00000000-0000-0000-0000-00000000000G", "UPPER"],
)
def test_a_receipt_without_a_readable_company_is_kept_and_names_none(paperclip, company):
    """Such a receipt proves nothing for a lease that has a company (Paperclip
    compares the strings), but it is evidence and the lease is readable: it is
    recorded with company None, the lease neither skipped nor quarantined. An
    upper-case spelling is not the uuid column's text, so it is none too."""
    p = paperclip
    env = p.environment()

    def metadata(row):
        receipt = termination(row)
        if company is None:
            del receipt["companyId"]
        elif company == "UPPER":
            receipt["companyId"] = receipt["companyId"].upper()
        else:
            receipt["companyId"] = company
        return {"remoteExecutionTermination": receipt}

    _, _, _, lease = p.task(env, metadata=metadata)
    out = mirror(p)
    assert "skipped 0; quarantined 0" in out, out
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert not row.placeholder and row.company_id == p.company["id"]
    receipt = row.receipts.get()
    assert receipt.company_id is None
    if company is not None:
        assert (
            receipt.payload["companyId"]
            == p.metadata(lease)["remoteExecutionTermination"]["companyId"]
        )


@pytest.mark.parametrize("request_id", [None, "", "   ", 7])
def test_a_stop_receipt_without_a_request_id_is_kept_and_says_so(paperclip, request_id):
    """Paperclip confirms a stop-and-retain receipt only with a non-blank string
    requestId. The mirror keeps it (receipts are evidence) under an id of its
    own, the payload unchanged plus requestIdMissing, so the predicate can
    refuse it."""
    p = paperclip
    env = p.environment()

    def metadata(row):
        receipt = stop_receipt(row, "unused")
        if request_id is None:
            del receipt["requestId"]
        else:
            receipt["requestId"] = request_id
        return {
            "remoteExecutionTermination": termination(row),
            "sandboxStopAndRetainReceipt": receipt,
        }

    _, _, _, lease = p.task(env, metadata=metadata)
    out = mirror(p)
    assert "skipped 0; quarantined 0" in out, out
    written = p.metadata(lease)["sandboxStopAndRetainReceipt"]
    stop = m.Receipt.objects.get(lease_id=lease["id"], kind="stop_and_retain")
    assert stop.request_id.startswith("mirror:")
    assert stop.payload["requestIdMissing"] is True
    assert {k: stop.payload[k] for k in written} == written
    assert ("requestId" in stop.payload) == (request_id is not None)
    # Re-mirroring finds the same receipt: its made-up id is stable.
    mirror(p)
    assert m.Receipt.objects.filter(lease_id=lease["id"], kind="stop_and_retain").count() == 1


def test_an_installation_without_company_id_still_mirrors():
    """An older or adapted schema without the column: every table is still
    read, its rows without a company, and the summary names what is missing."""
    name = scratch_name("paperclip_nocompany_test")
    dsn = create_database(name)
    p = Paperclip(dsn)
    try:
        p.truncate()
        env = p.environment()
        issue, _, _, lease = p.task(
            env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
        )
        p.recovery_action(issue, [lease])
        for table in MIRRORED_TABLES:
            p.conn.execute(f'ALTER TABLE "{table}" DROP COLUMN company_id CASCADE')
        report = mirror_once(dsn, full=True)
    finally:
        p.close()
        drop_database(name)
    assert report.skipped == 0 and report.quarantined == 0, report.summary()
    assert {f"{t}.company_id" for t in MIRRORED_TABLES} <= set(report.columns_missing)
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert not row.placeholder and row.company_id is None
    assert row.issue.company_id is None and row.environment.company_id is None
    # The receipt still names the company it carries.
    assert row.receipts.get().company_id is not None


def test_a_restore_source_keeps_its_marker(paperclip):
    """preserveLegacyWorkspaceRestoreSources (legacy-workspace-restore-recovery.ts)
    marks the lease: retain_on_failure and metadata.workspaceRestoreRecovery
    {schema, runId}, an active lease getting its stop-only intent first. The
    marker stays in the mirrored metadata, where the listing asks
    `metadata ? 'workspaceRestoreRecovery'`, through the stop's settlement."""
    p = paperclip
    env = p.environment()
    _, _, run, lease = p.task(
        env, run_status="failed", status="active", released_at=None, cleanup_status=None
    )
    _, _, _, plain = p.task(env)
    p.preserve_restore_source(lease)
    marker = {"schema": RESTORE_SCHEMA, "runId": str(run["id"])}
    out = mirror(p)
    assert "skipped 0; quarantined 0" in out, out

    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert (row.status, row.lease_policy) == ("pending_cleanup", "retain_on_failure")
    assert row.metadata["workspaceRestoreRecovery"] == marker
    assert m.LeaseIntent.objects.get(lease=row).state == "pending"
    marked = m.EnvironmentLease.objects.filter(metadata__has_key="workspaceRestoreRecovery")
    assert list(marked.values_list("pk", flat=True)) == [lease["id"]]
    assert plain["id"] not in marked.values_list("pk", flat=True)

    p.settle_stop(lease)  # the stop worker: released, both receipts, marker kept
    mirror(p)
    row.refresh_from_db()
    assert (row.status, row.lease_policy) == ("released", "retain_on_failure")
    assert row.metadata["workspaceRestoreRecovery"] == marker
    assert row.receipts.count() == 2


@pytest.mark.parametrize("marker", ["paperclip.workspace-restore-recovery.v1", None, [1]])
def test_a_broken_restore_marker_is_quarantined_and_named(paperclip, marker):
    """A marker that is not an object is a known key in a broken shape: the lease
    is quarantined (kept out of the reconciler's view, no receipts) like a
    broken receipt, until Paperclip writes a readable one."""
    p = paperclip
    env = p.environment()
    _, _, _, lease = p.task(
        env,
        lease_policy="retain_on_failure",
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row),
            "workspaceRestoreRecovery": marker,
        },
    )
    out = mirror(p)
    assert "environment_leases: workspaceRestoreRecovery is not a JSON object ×1" in out, out
    row = m.EnvironmentLease.objects.get(pk=lease["id"])
    assert row.placeholder and not row.receipts.exists()
    assert row.metadata["workspaceRestoreRecovery"] == marker  # kept as written, to be seen


def test_the_payload_confirmed_at_is_the_original_string(paperclip):
    """Condition 15 of hasConfirmedSandboxStopAndRetain compares the two
    receipts' confirmedAt strings: the payload keeps Paperclip's text, not a
    re-rendered time."""
    p = paperclip
    env = p.environment()
    text = "2026-11-01T03:00:00.120Z"
    _, _, _, lease = p.task(
        env,
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row) | {"confirmedAt": text},
            "sandboxStopAndRetainReceipt": stop_receipt(row, str(uuid.uuid4()))
            | {"confirmedAt": text},
        },
    )
    mirror(p)
    assert {r.payload["confirmedAt"] for r in m.Receipt.objects.filter(lease_id=lease["id"])} == {
        text
    }


def test_the_fixture_schema_has_company_id_on_every_mirrored_table(paperclip):
    """The fixture DDL (sandboxes/mirror/paperclip_schema.sql) is Paperclip's:
    company_id uuid NOT NULL on each table the mirror reads."""
    with psycopg.connect(paperclip.dsn) as conn:
        found = conn.execute(
            "SELECT table_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE column_name = 'company_id' AND table_name = ANY(%s)",
            [list(MIRRORED_TABLES)],
        ).fetchall()
    assert sorted(found) == [(t, "uuid", "NO") for t in sorted(MIRRORED_TABLES)]
