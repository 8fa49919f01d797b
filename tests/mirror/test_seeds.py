"""The seed incidents, written into Paperclip's real schema the way Paperclip
writes them, mirrored, and judged by `manage.py reconcile --once --dry-run`
exactly as the seeds say (../shared/seeds/000-004, DOMAIN §2.1-§2.2).

Rows follow paperclipai/paperclip: leases as environment_leases.ts, receipts
and stop intents as remote-execution-termination.ts and
sandbox-stop-and-retain.ts, restore sources as legacy-execution-recovery.ts
(lease_policy retain_on_failure, metadata.workspaceRestoreRecovery {schema,
runId}; the action's evidence.workspaceRestoreRecovery.leaseIds), replacements
as environment-runtime.ts (sandboxLeaseAcquisition {outcome: "replacement",
reason: "resume_failed"} on the new lease, the old one pending_cleanup with
failure_reason resume_failed), saves as sandbox-work-folders.
"""

import re
from io import StringIO

import pytest
from django.core.management import call_command

from sandboxes.models.choices import HoldCode, RetirementKind
from sandboxes.rules.holds import blocking_holds

from .paperclip import RESTORE_SCHEMA, ago, stop_intent, stop_receipt, termination

pytestmark = pytest.mark.django_db

LINE = re.compile(
    r"^would list (?P<provider>[^:]+):(?P<sid>.+) (?P<kind>\w+): (?P<stage>\w+)"
    r"(?: \((?P<holds>[^)]*)\))?$"
)


def mirror_and_judge(paperclip) -> dict[str, tuple[str, str, list[str]]]:
    """sandbox id → (kind, stage, blocking holds) from `reconcile --once --dry-run`."""
    out = StringIO()
    call_command("mirror_paperclip", "--dsn", paperclip.dsn, stdout=out, stderr=StringIO())
    assert "skipped 0; quarantined 0" in out.getvalue(), out.getvalue()
    out = StringIO()
    call_command("reconcile", "--once", "--dry-run", stdout=out)
    judged = {}
    for line in out.getvalue().splitlines():
        match = LINE.match(line)
        if match:
            holds = [h for h in (match["holds"] or "").split(", ") if h]
            judged[match["sid"]] = (match["kind"], match["stage"], holds)
    assert "dry run: nothing written" in out.getvalue()
    return judged


def stopped(row):
    return {"remoteExecutionTermination": termination(row)}


def seed_001_t05(p, env):
    """t05: run 8758207a's sandbox was resumed by c99b3a2e and released stopped;
    the Retry kept a fresh workspace and provisioned a new sandbox."""
    issue, old_ws, _, first = p.task(env, metadata=stopped)
    resumed = p.run(issue, "failed")
    lease = p.lease(
        env,
        issue,
        old_ws,
        resumed,
        provider_lease_id=first["provider_lease_id"],  # the same sandbox, resumed
        acquired_at=ago(hours=2, minutes=30),
        metadata=lambda row: (
            stopped(row)
            | {
                "sandboxLeaseAcquisition": {
                    "outcome": "resumed",
                    "providerLeaseId": row["provider_lease_id"],
                }
            }
        ),
    )
    fresh = p.retry_to_new_workspace(issue)
    retry = p.run(issue, "succeeded")
    p.lease(env, issue, fresh, retry, acquired_at=ago(hours=1), metadata=stopped)
    return issue, lease


def seed_001_t12(p, env):
    """t12: run f2bf2f05's lease was released as `failed` with the sandbox
    stopped; the next run on the same workspace provisioned a new one."""
    issue, ws, _, lease = p.task(
        env, run_status="failed", status="failed", failure_reason="adapter_failed", metadata=stopped
    )
    nxt = p.run(issue, "succeeded")
    p.lease(env, issue, ws, nxt, acquired_at=ago(hours=1), metadata=stopped)
    return issue, lease


def restore_source(p, env, action_status: str | None):
    """A failed run's stopped sandbox kept for workspace restore (a095e0b5)."""
    issue, ws, run, lease = p.task(
        env,
        run_status="failed",
        lease_policy="retain_on_failure",
        metadata=lambda row: (
            stopped(row)
            | {
                "workspaceRestoreRecovery": {
                    "schema": RESTORE_SCHEMA,
                    "runId": str(row["heartbeat_run_id"]),
                }
            }
        ),
    )
    if action_status is not None:
        p.recovery_action(issue, [lease], status=action_status)
    return issue, lease


def test_seed_001_t05_and_t12_are_abandoned_warm_and_listed(paperclip):
    p = paperclip
    env = p.environment()
    _, t05 = seed_001_t05(p, env)
    _, t12 = seed_001_t12(p, env)
    judged = mirror_and_judge(p)
    assert judged[t05["provider_lease_id"]] == ("abandoned_warm", "listed", [])
    assert judged[t12["provider_lease_id"]] == ("abandoned_warm", "listed", [])


def test_the_a095e0b5_restore_source_stays_with_restore_recovery(paperclip):
    """Seed 001 "Out of scope": a retain_on_failure lease kept for workspace
    restore stays with restore recovery while its action is open; seed 000:
    once a Retry closes the action and the task moves on, it is retired."""
    p = paperclip
    env = p.environment()
    issue, lease = restore_source(p, env, "active")
    assert lease["provider_lease_id"] not in mirror_and_judge(p)

    action_id = p.conn.execute(
        "SELECT id FROM issue_recovery_actions WHERE source_issue_id = %s", [issue["id"]]
    ).fetchone()[0]
    p.update("issue_recovery_actions", action_id, status="resolved", outcome="retried")
    p.retry_to_new_workspace(issue)
    p.update("issues", issue["id"], status="done")
    assert mirror_and_judge(p)[lease["provider_lease_id"]] == (
        "closed_restore_source",
        "listed",
        [],
    )


def test_a_restore_source_with_no_recovery_action_is_not_a_candidate(paperclip):
    p = paperclip
    env = p.environment()
    issue, lease = restore_source(p, env, None)
    p.retry_to_new_workspace(issue)
    p.update("issues", issue["id"], status="done")
    assert lease["provider_lease_id"] not in mirror_and_judge(p)


def test_a_run_still_live_on_the_task_holds_it(paperclip):
    p = paperclip
    env = p.environment()
    issue, lease = seed_001_t05(p, env)
    p.run(issue, "running")
    assert mirror_and_judge(p)[lease["provider_lease_id"]] == (
        "abandoned_warm",
        "held",
        ["issue_run_active"],
    )


STOP_ONLY_BLOCKED = HoldCode.INTENT_PENDING in blocking_holds(
    [HoldCode.INTENT_PENDING], RetirementKind.SUPERSEDED_RUNNING_WARM
)


@pytest.mark.xfail(
    not STOP_ONLY_BLOCKED,
    strict=True,
    reason="issue 10 item 4 (engineer i10b): every hold blocks stop-only steps too",
)
def test_a_stop_in_flight_is_held_intent_pending(paperclip):
    """Seed 001: a running superseded warm sandbox gets a stop-only intent;
    until the provider confirms, the intent holds it."""
    p = paperclip
    env = p.environment()
    issue, _, _, lease = p.task(env, status="retained", released_at=None, cleanup_status=None)
    p.retry_to_new_workspace(issue)
    p.update(
        "environment_leases", lease["id"], metadata={"sandboxStopAndRetain": stop_intent(lease)}
    )
    judged = mirror_and_judge(p)
    assert judged[lease["provider_lease_id"]] == (
        "superseded_running_warm",
        "held",
        ["intent_pending"],
    )


def test_a_stop_in_flight_carries_the_intent_pending_hold(paperclip):
    """What the dry run blocks on aside, the hold itself is there (DOMAIN §2.2)."""
    from django.utils import timezone

    from sandboxes.reconciler.listing import evaluate_fleet

    p = paperclip
    env = p.environment()
    issue, _, _, lease = p.task(env, status="retained", released_at=None, cleanup_status=None)
    p.retry_to_new_workspace(issue)
    p.update(
        "environment_leases", lease["id"], metadata={"sandboxStopAndRetain": stop_intent(lease)}
    )
    mirror_and_judge(p)
    (e,) = [e for e in evaluate_fleet(now=timezone.now()) if e.candidate.lease_id == lease["id"]]
    assert e.candidate.kind == "superseded_running_warm" and "intent_pending" in e.holds


def test_an_export_resume_marker_is_held_export_pending(paperclip):
    from .paperclip import export_resume_marker

    p = paperclip
    env = p.environment()
    issue, lease = seed_001_t05(p, env)
    metadata = p.metadata(lease) | {
        "pluginId": "plg-1",
        "nativeWorkspaceExportResume": export_resume_marker(lease, "plg-1"),
    }
    p.update("environment_leases", lease["id"], metadata=metadata)
    assert mirror_and_judge(p)[lease["provider_lease_id"]] == (
        "abandoned_warm",
        "held",
        ["export_pending"],
    )


def done_task_warm(p, env, idle_hours: float):
    """Seed 000: a done task's suspended warm sandbox (stopped and retained)."""
    request_id = "3f7d0c7e-59a4-4a3f-9c55-2f4a0f7e9f10"
    _, _, run, lease = p.task(
        env,
        issue_status="done",
        released_at=ago(hours=idle_hours),
        last_used_at=ago(hours=idle_hours),
        metadata=lambda row: {
            "remoteExecutionTermination": termination(row, at=ago(hours=idle_hours)),
            "sandboxStopAndRetainReceipt": stop_receipt(row, request_id, at=ago(hours=idle_hours)),
        },
    )
    p.save(run, lease, {"README.md": "# done"})
    return lease


def test_a_done_task_idle_30_hours_is_retired_after_retention(paperclip):
    p = paperclip
    env = p.environment()
    idle = done_task_warm(p, env, 30)
    recent = done_task_warm(p, env, 10)
    judged = mirror_and_judge(p)
    assert judged[idle["provider_lease_id"]] == ("done_task_warm", "listed", [])
    assert judged[recent["provider_lease_id"]] == ("done_task_warm", "held", ["retention"])


def test_a_resume_failed_replacement_is_a_resume_failed_candidate(paperclip):
    """Seed 004: the sandbox would not resume; Paperclip replaced it from the
    saved snapshot and moved the old lease to pending_cleanup (resume_failed)."""
    p = paperclip
    env = p.environment()
    issue, ws, run, old = p.task(env, metadata=stopped)
    p.save(run, old, {"src/main.py": "print('saved')"})
    nxt = p.run(issue, "succeeded")
    p.lease(
        env,
        issue,
        ws,
        nxt,
        acquired_at=ago(hours=1),
        metadata=lambda row: {
            "sandboxLeaseAcquisition": {
                "outcome": "replacement",
                "providerLeaseId": row["provider_lease_id"],
                "previousProviderLeaseId": old["provider_lease_id"],
                "reason": "resume_failed",
            },
            "remoteExecutionTermination": termination(row),
        },
    )
    p.update(
        "environment_leases",
        old["id"],
        status="pending_cleanup",
        cleanup_status="failed",
        failure_reason="resume_failed",
    )
    assert mirror_and_judge(p)[old["provider_lease_id"]] == ("resume_failed", "listed", [])


@pytest.mark.xfail(
    not hasattr(HoldCode, "PROVIDER_UNSUPPORTED"),
    strict=True,
    reason="issue 10 item 9 (engineer i10b): provider_unsupported hold not landed",
)
def test_an_ssh_sandbox_is_listed_and_held_provider_unsupported(paperclip):
    p = paperclip
    env = p.environment(driver="ssh", provider=None)
    issue, _, _, lease = p.task(
        env, provider_lease_id="ssh://build-7.internal/srv/work/PAP-9", metadata=stopped
    )
    p.retry_to_new_workspace(issue)
    judged = mirror_and_judge(p)
    kind, stage, holds = judged["ssh://build-7.internal/srv/work/PAP-9"]
    assert (kind, stage) == ("abandoned_warm", "held") and "provider_unsupported" in holds
