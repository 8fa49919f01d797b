"""Reconciler listing, holds, sync and a whole no-change pass on PostgreSQL (a
scratch database), each beside a raw SQL count of the same candidate predicates.

    .venv/bin/python benchmarks/reconciler_listing.py \
        [--sizes 100000] [--fleet 10000,100000,1000000] [--repeat 5]

Two fleets:

* `--sizes`: issue 4's fleet (bulk_create, ~14 % of the leases are candidates).
  Target (issue 16): 100k leases, listing + holds under 1 s.
* `--fleet`: a year of history (devtools.bench_fleet, loaded with COPY): ~95 %
  of the lease rows `expired`, one kept sandbox per 200 rows (5,000 at 1M)
  across every kind and hold. Targets (issue 16) at 1M: listing + holds + sync
  under 1 s and within 3x of the raw SQL count with JIT off; a pass over the
  unchanged fleet under 300 ms, writing nothing but its ReconcilerPass row; the
  same query count at every size.

The listing turns PostgreSQL's JIT off for its transaction (compiling cost more
than executing), so the raw count is timed both as configured and with JIT off.
Each line ends with the machine's load average: the figures are only comparable
with the floors measured beside them.
"""

import argparse
import os
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
WHERE NOT l.superseded AND l.status IN ('released', 'failed', 'retained', 'pending_cleanup')
  AND NOT l.placeholder AND NOT e.placeholder
  AND (i.id IS NULL OR NOT i.placeholder)
  AND (w.id IS NULL OR NOT w.placeholder)
  AND (r.id IS NULL OR NOT r.placeholder)
  AND NOT EXISTS (
    SELECT 1 FROM sandboxes_environmentlease n
    WHERE n.provider = l.provider AND n.provider_lease_id = l.provider_lease_id
      AND n.id <> l.id
      AND (n.acquired_at > l.acquired_at OR (n.acquired_at = l.acquired_at AND n.id > l.id)
           OR (n.acquired_at IS NOT NULL AND l.acquired_at IS NULL)
           OR (n.acquired_at IS NULL AND l.acquired_at IS NULL AND n.id > l.id)))
  AND (
    (l.status = 'pending_cleanup' AND l.failure_reason = 'resume_failed')
    OR (r.status IN ('failed','cancelled','timed_out','interrupted')
        AND NOT EXISTS (SELECT 1 FROM sandboxes_receipt s
                        WHERE s.lease_id = l.id AND s.run_id = l.heartbeat_run_id
                          AND s.provider_lease_id = l.provider_lease_id
                          AND ((s.kind = 'termination' AND s.state = 'stopped')
                               OR s.kind = 'stop_and_retain'))
        AND (l.status = 'retained'
             OR (l.disposition = 'keep_running'
                 AND l.status IN ('released','failed','retained'))))
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

    # Receipts and audit rows refuse TRUNCATE (append-only) except in replica mode.
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "TRUNCATE sandboxes_leaseintent, sandboxes_pendingexport, sandboxes_recoveryaction,"
            " sandboxes_retirement, sandboxes_environmentlease, sandboxes_heartbeatrun,"
            " sandboxes_executionworkspace, sandboxes_issue, sandboxes_environment,"
            " sandboxes_reconcilerpass CASCADE"
        )
        cursor.execute("SET session_replication_role = origin")


WRITES = ("INSERT", "UPDATE", "DELETE", "MERGE")


def _is_write(sql: str) -> bool:
    return sql.lstrip().upper().startswith(WRITES)


def timed(fn, repeat: int):
    """Median seconds, queries and write statements of the last run, and its result."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, result = [], None
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as ctx:
            started = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - started)
    sql = [q["sql"] for q in ctx.captured_queries]
    return statistics.median(times), len(sql), [q for q in sql if _is_write(q)], result


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def raw_counters():
    from django.db import connection, transaction

    def raw_count():
        with connection.cursor() as cursor:
            cursor.execute(RAW_COUNT)
            return cursor.fetchone()[0]

    def raw_count_without_jit():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
            cursor.execute(RAW_COUNT)
            return cursor.fetchone()[0]

    return raw_count, raw_count_without_jit


def old_fleet(sizes: list[int], repeat: int) -> None:
    from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements

    raw_count, raw_count_without_jit = raw_counters()
    print("issue 4's fleet (~14 % candidates):")
    print(
        f"{'leases':>8} {'candidates':>10} {'held':>6} {'list+holds':>11} {'queries':>7}"
        f" {'raw count':>10} {'ratio':>6} {'raw no-JIT':>10} {'ratio':>6} {'sync':>8}"
    )
    for n in sizes:
        clear()
        build_fleet(n)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        seconds, queries, _, evaluated = timed(evaluate_fleet, repeat)
        raw_seconds, _, _, raw = timed(raw_count, repeat)
        nojit_seconds, _, _, _ = timed(raw_count_without_jit, repeat)
        assert raw == len(evaluated), (raw, len(evaluated))
        sync_retirements()  # first sync creates the records
        sync_seconds, _, _, _ = timed(sync_retirements, repeat)  # steady state
        held = sum(1 for e in evaluated if e.blocking)
        print(
            f"{m_leases():>8} {len(evaluated):>10} {held:>6} {seconds * 1000:>9.0f}ms {queries:>7}"
            f" {raw_seconds * 1000:>8.0f}ms {seconds / raw_seconds:>5.1f}x"
            f" {nojit_seconds * 1000:>8.0f}ms {seconds / nojit_seconds:>5.1f}x"
            f" {sync_seconds * 1000:>6.0f}ms  ({load()})"
        )


def year_fleet(sizes: list[int], repeat: int, per_kept: int) -> None:
    from devtools.bench_fleet import build_fleet as build_year
    from sandboxes.models import ReconcilerPass, Retirement
    from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements
    from sandboxes.reconciler.passes import run_pass

    raw_count, raw_count_without_jit = raw_counters()
    print("\na year of history (~95 % expired, COPY-loaded):")
    for n in sizes:
        clear()
        started = time.perf_counter()
        stats = build_year(leases=n, kept=max(n // per_kept, 1))
        built = time.perf_counter() - started
        print(
            f"\n{stats.leases:,} leases ({stats.expired / stats.leases:.0%} expired), "
            f"{stats.kept_sandboxes:,} kept sandboxes; {sum(stats.rows.values()):,} rows "
            f"loaded in {built:.0f} s ({load()})"
        )
        seconds, queries, _, evaluated = timed(evaluate_fleet, repeat)
        nojit_seconds, _, _, raw = timed(raw_count_without_jit, repeat)
        raw_seconds, _, _, _ = timed(raw_count, repeat)
        assert raw == len(evaluated), (raw, len(evaluated))
        held = sum(1 for e in evaluated if e.blocking)
        print(
            f"  listing + holds      {seconds * 1000:7.0f} ms {queries:3} queries  "
            f"{len(evaluated):,} candidates, {held:,} held  ({load()})"
        )
        print(
            f"  raw SQL count no-JIT {nojit_seconds * 1000:7.0f} ms   "
            f"(listing {seconds / nojit_seconds:.1f}x; with JIT {raw_seconds * 1000:.0f} ms)"
        )
        first_seconds, first_queries, _, first = timed(sync_retirements, 1)
        print(
            f"  first sync           {first_seconds * 1000:7.0f} ms {first_queries:3} queries  "
            f"{first.created:,} records created  ({load()})"
        )
        # A few operator holds, as an operator would leave them.
        for pk in Retirement.objects.values_list("pk", flat=True)[:: max(per_kept // 4, 1)][:50]:
            Retirement.objects.filter(pk=pk).update(operator_hold_reason="bench: keep for now")
        sync_retirements()
        sync_seconds, sync_queries, sync_writes, _ = timed(sync_retirements, repeat)
        print(
            f"  list + holds + sync  {sync_seconds * 1000:7.0f} ms {sync_queries:3} queries  "
            f"{len(sync_writes)} writes, unchanged fleet  "
            f"({sync_seconds / nojit_seconds:.1f}x raw no-JIT; {load()})"
        )
        pass_seconds, pass_queries, pass_writes, record = timed(run_pass, repeat)
        other = [w for w in pass_writes if "sandboxes_reconcilerpass" not in w]
        print(
            f"  no-change pass       {pass_seconds * 1000:7.0f} ms {pass_queries:3} queries  "
            f"{len(pass_writes)} writes ({len(other)} besides its pass row), "
            f"{record.candidates:,} candidates  ({load()})"
        )
        for w in other[:5]:
            print(f"    write: {w[:160]}")
        assert ReconcilerPass.objects.count() == repeat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000", help="issue 4's fleet; '' to skip")
    parser.add_argument("--fleet", default="10000,100000,1000000", help="a year of history")
    parser.add_argument("--per-kept", type=int, default=200, help="lease rows per kept sandbox")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--db", default=DB, help=f"scratch database (default {DB})")
    args = parser.parse_args()
    setup(args.db)
    import logging

    logging.getLogger("sandboxes").setLevel(logging.WARNING)  # the pass logs each run
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
        if sizes:
            old_fleet(sizes, args.repeat)
        fleet = [int(s) for s in args.fleet.split(",") if s]
        if fleet:
            year_fleet(fleet, args.repeat, args.per_kept)
    finally:
        if not args.keep:
            teardown(args.db)


def m_leases() -> int:
    from sandboxes.models import EnvironmentLease

    return EnvironmentLease.objects.count()


if __name__ == "__main__":
    main()
