"""Reconciler listing + hold evaluation at 1,000 / 10,000 / 100,000 leases on
PostgreSQL (a scratch database), beside a raw SQL count of the same candidate
predicates. Prints time and query count per size.

    .venv/bin/python benchmarks/reconciler_listing.py [--sizes 1000,10000,100000]

Target (issue 4): 100k leases under 2 s, within 3x of the raw SQL count, and
the same query count at every size. The listing turns PostgreSQL's JIT off
for its transaction (compiling cost more than executing), so the raw count is
timed both as the server is configured and with JIT off.
"""

import argparse
import random
import statistics
import time
import uuid
from datetime import timedelta

from _bench_db import setup, teardown

DB = "paperclip_bench_reconciler"

RAW_COUNT = """
SELECT count(*)
FROM sandboxes_environmentlease l
JOIN sandboxes_environment e ON e.id = l.environment_id
LEFT JOIN sandboxes_issue i ON i.id = l.issue_id
LEFT JOIN sandboxes_executionworkspace w ON w.id = l.execution_workspace_id
LEFT JOIN sandboxes_heartbeatrun r ON r.id = l.heartbeat_run_id
WHERE NOT l.placeholder AND NOT e.placeholder
  AND (i.id IS NULL OR NOT i.placeholder)
  AND (w.id IS NULL OR NOT w.placeholder)
  AND (r.id IS NULL OR NOT r.placeholder)
  AND NOT EXISTS (
    SELECT 1 FROM sandboxes_environmentlease n
    WHERE n.provider = l.provider AND n.provider_lease_id = l.provider_lease_id
      AND n.id <> l.id
      AND (n.acquired_at > l.acquired_at OR (n.acquired_at = l.acquired_at AND n.id > l.id)))
  AND (
    (l.status = 'pending_cleanup' AND l.failure_reason = 'resume_failed')
    OR (r.status IN ('failed','cancelled','timed_out','interrupted') AND (
          l.status = 'retained'
          OR (l.disposition = 'keep_running' AND l.status IN ('released','failed')
              AND NOT EXISTS (SELECT 1 FROM sandboxes_receipt s
                              WHERE s.lease_id = l.id AND s.run_id = l.heartbeat_run_id
                                AND ((s.kind = 'termination' AND s.state = 'stopped')
                                     OR s.kind = 'stop_and_retain')))))
    OR (l.lease_policy = 'reuse_by_environment' AND l.status = 'retained'
        AND i.bound_workspace_id IS NOT NULL
        AND i.bound_workspace_id IS DISTINCT FROM l.execution_workspace_id
        AND (r.id IS NULL OR r.status NOT IN ('queued','scheduled_retry','running')))
    OR (l.lease_policy = 'reuse_by_environment' AND (l.status = 'failed'
        OR (l.status = 'released' AND i.bound_workspace_id IS NOT NULL
            AND i.bound_workspace_id IS DISTINCT FROM l.execution_workspace_id)))
    OR (l.lease_policy = 'retain_on_failure' AND l.status IN ('released','failed','retained')
        AND NOT EXISTS (SELECT 1 FROM sandboxes_recoveryaction a
                        WHERE a.lease_id = l.id AND a.status IN ('active','escalated')))
    OR (l.lease_policy IN ('reuse_by_environment','reuse_by_execution_workspace')
        AND l.status = 'released' AND i.status IN ('done','cancelled'))
  )
"""


def build_fleet(n: int, seed: int = 4) -> None:
    """n leases: ~15 % candidates of every kind, the rest kept or in use, with
    older rows on some sandboxes and every kind of hold fact sprinkled in."""
    from django.db import transaction
    from django.utils import timezone

    from sandboxes import models as m

    rng = random.Random(seed)
    now = timezone.now()
    env = m.Environment.objects.create(name=f"bench-{n}", provider="daytona")
    issues, workspaces, runs, leases, receipts = [], [], [], [], []
    recoveries, exports, intents, bindings = [], [], [], []
    shapes = [
        # (weight, lease status, policy, run status, issue status, bound here, receipt, extra)
        (40, "released", "reuse_by_environment", "succeeded", "in_progress", True, True, ""),
        (25, "active", "reuse_by_environment", "running", "in_progress", True, False, ""),
        (15, "expired", "ephemeral", "succeeded", "done", True, False, ""),
        (5, "released", "reuse_by_environment", "failed", "in_progress", False, True, ""),
        (3, "failed", "reuse_by_environment", "failed", "todo", True, True, ""),
        (2, "retained", "reuse_by_environment", "succeeded", "in_progress", False, False, ""),
        (2, "failed", "retain_on_failure", "failed", "in_progress", True, False, "recovery"),
        (2, "released", "reuse_by_environment", "succeeded", "done", True, True, "old"),
        (1, "pending_cleanup", "reuse_by_environment", "succeeded", "todo", True, True, "resume"),
        (1, "retained", "reuse_by_environment", "timed_out", "todo", True, False, "keep"),
        (4, "released", "reuse_by_environment", "succeeded", "todo", True, False, "older"),
    ]
    weights = [s[0] for s in shapes]
    k = 0
    while len(leases) < n:
        k += 1
        _, status, policy, run_status, issue_status, bound_here, receipt, extra = rng.choices(
            shapes, weights
        )[0]
        issue = m.Issue(id=uuid.uuid4(), key=f"PAP-{k}", status=issue_status)
        ws = m.ExecutionWorkspace(id=uuid.uuid4(), issue_id=issue.id, save_state="saved")
        other_ws = m.ExecutionWorkspace(id=uuid.uuid4(), issue_id=issue.id, save_state="saved")
        run = m.HeartbeatRun(id=uuid.uuid4(), issue_id=issue.id, status=run_status)
        acquired = now - timedelta(hours=rng.randint(2, 200))
        lease = m.EnvironmentLease(
            id=uuid.uuid4(),
            environment_id=env.id,
            execution_workspace_id=ws.id,
            issue_id=issue.id,
            heartbeat_run_id=run.id,
            status=status,
            lease_policy=policy,
            provider="daytona",
            provider_lease_id=f"sbx-{n}-{k}",
            acquired_at=acquired,
            released_at=acquired + timedelta(hours=1) if status != "active" else None,
            failure_reason="resume_failed" if extra == "resume" else "",
            disposition="keep_running" if extra == "keep" else "stop_and_retain",
        )
        issues.append(issue)
        workspaces += [ws, other_ws]
        runs.append(run)
        leases.append(lease)
        bindings.append((issue, ws.id if bound_here else other_ws.id))
        if receipt:
            receipts.append(
                m.Receipt(
                    kind="termination",
                    state="stopped",
                    lease_id=lease.id,
                    run_id=run.id,
                    provider_lease_id=lease.provider_lease_id,
                    confirmed_at=lease.released_at or now,
                    request_id=uuid.uuid4().hex,
                )
            )
        if extra == "recovery":
            recoveries.append(
                m.RecoveryAction(
                    source_issue_id=issue.id,
                    lease_id=lease.id,
                    kind="workspace_restore",
                    status=rng.choice(["active", "resolved", "resolved"]),
                )
            )
        if (extra == "older" or rng.random() < 0.05) and len(leases) < n:
            # An older row on the same sandbox (several rows over time).
            leases.append(
                m.EnvironmentLease(
                    id=uuid.uuid4(),
                    environment_id=env.id,
                    execution_workspace_id=ws.id,
                    issue_id=issue.id,
                    heartbeat_run_id=run.id,
                    status="failed",
                    lease_policy="reuse_by_environment",
                    provider="daytona",
                    provider_lease_id=lease.provider_lease_id,
                    acquired_at=acquired - timedelta(days=3),
                )
            )
        if rng.random() < 0.02:
            exports.append(m.PendingExport(lease_id=lease.id, state="pending"))
        if rng.random() < 0.02:
            intents.append(m.LeaseIntent(lease_id=lease.id, kind="restore", state="pending"))
    for issue, bound in bindings:
        issue.bound_workspace_id = bound
    size = 5000
    # Issues and workspaces name each other; Django's FKs are deferred to commit.
    with transaction.atomic():
        for model, rows in (
            (m.Issue, issues),
            (m.ExecutionWorkspace, workspaces),
            (m.HeartbeatRun, runs),
            (m.EnvironmentLease, leases),
            (m.Receipt, receipts),
            (m.RecoveryAction, recoveries),
            (m.PendingExport, exports),
            (m.LeaseIntent, intents),
        ):
            model.objects.bulk_create(rows, batch_size=size)


def clear() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE sandboxes_leaseintent, sandboxes_pendingexport, sandboxes_recoveryaction,"
            " sandboxes_retirement, sandboxes_environmentlease, sandboxes_heartbeatrun,"
            " sandboxes_executionworkspace, sandboxes_issue, sandboxes_environment CASCADE"
        )


def timed(fn, repeat: int):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, queries, result = [], 0, None
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as ctx:
            started = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - started)
        queries = len(ctx.captured_queries)
    return statistics.median(times), queries, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    setup(DB)
    try:
        from django.db import connection, transaction

        from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements

        def raw_count():
            with connection.cursor() as cursor:
                cursor.execute(RAW_COUNT)
                return cursor.fetchone()[0]

        def raw_count_without_jit():
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
                cursor.execute(RAW_COUNT)
                return cursor.fetchone()[0]

        print(
            f"{'leases':>8} {'candidates':>10} {'held':>6} {'list+holds':>11} {'queries':>7}"
            f" {'raw count':>10} {'ratio':>6} {'raw no-JIT':>10} {'ratio':>6} {'sync':>8}"
        )
        for n in [int(s) for s in args.sizes.split(",")]:
            clear()
            build_fleet(n)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            seconds, queries, evaluated = timed(evaluate_fleet, args.repeat)
            raw_seconds, _, raw = timed(raw_count, args.repeat)
            nojit_seconds, _, _ = timed(raw_count_without_jit, args.repeat)
            assert raw == len(evaluated), (raw, len(evaluated))
            sync_retirements()  # first sync creates the records
            sync_seconds, _, _ = timed(sync_retirements, 1)  # steady state
            held = sum(1 for e in evaluated if e.blocking)
            total = m_leases()
            print(
                f"{total:>8} {len(evaluated):>10} {held:>6} {seconds * 1000:>9.0f}ms {queries:>7}"
                f" {raw_seconds * 1000:>8.0f}ms {seconds / raw_seconds:>5.1f}x"
                f" {nojit_seconds * 1000:>8.0f}ms {seconds / nojit_seconds:>5.1f}x"
                f" {sync_seconds * 1000:>6.0f}ms"
            )
    finally:
        if not args.keep:
            teardown(DB)


def m_leases() -> int:
    from sandboxes.models import EnvironmentLease

    return EnvironmentLease.objects.count()


if __name__ == "__main__":
    main()
