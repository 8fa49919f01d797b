"""Reconciler listing, holds, sync and whole passes on PostgreSQL (a scratch
database), each figure printed beside its floor: a raw SQL count of the same
candidate predicates with JIT off, measured in the same run.

One command prints everything issue 16 asks for (a few minutes, the 1M fleet
build included):

    .venv/bin/python benchmarks/reconciler_listing.py \
        [--sizes 100000] [--fleet 10000,100000,1000000] [--repeat 5] [--db NAME]

Two fleets:

* `--sizes`: issue 4's fleet (bulk_create, ~14 % of the leases are candidates).
  Target (issue 16): 100k leases, listing + holds under 1 s.
* `--fleet`: a year of history (devtools.bench_fleet, loaded with COPY): ~95 %
  of the lease rows `expired`, one kept sandbox per 200 rows (5,000 at 1M)
  across every kind and hold. Targets (issue 16) at 1M: listing + holds + sync
  under 1 s and within 3x of the raw SQL count with JIT off; a pass over the
  unchanged fleet under 300 ms, writing nothing but its ReconcilerPass row (it
  reuses the last listing: sandboxes/reconciler/changes.py); the same query
  count at every size (asserted at the end). The first sync, which creates
  every record (one INSERT … SELECT: sandboxes/reconciler/new_records.py),
  within 2x of the floor, in the same number of queries at every size.

The listing turns PostgreSQL's JIT off for its transaction (compiling cost more
than executing), so the raw count is timed both with JIT off (the floor) and as
configured. Each line ends with the machine's load averages (1, 5, 15 min): the
figures are only comparable with the floors measured beside them.
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
        AND EXISTS (SELECT 1 FROM sandboxes_recoveryaction a
                    WHERE a.lease_id = l.id
                       OR (a.lease_id IS NULL AND a.source_issue_id = l.issue_id))
        AND NOT EXISTS (SELECT 1 FROM sandboxes_recoveryaction a
                        WHERE (a.lease_id = l.id
                               OR (a.lease_id IS NULL AND a.source_issue_id = l.issue_id))
                          AND a.status IN ('active','escalated'))
        AND (i.status IN ('done','cancelled')
             OR (i.bound_workspace_id IS NOT NULL
                 AND i.bound_workspace_id IS DISTINCT FROM l.execution_workspace_id)))
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
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


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


def line(label: str, seconds: float, floor: float, queries: int | None = None, note: str = ""):
    """One figure beside its floor (the raw SQL count, JIT off, measured just before)."""
    q = f"{queries:3} queries" if queries is not None else " " * 11
    print(
        f"  {label:<38} {seconds * 1000:7.0f} ms {q}  {seconds / floor:5.1f}x floor  "
        f"{note}  ({load()})",
        flush=True,
    )


def first_sync(sync_retirements, floor: float, repeat: int = 1) -> int:
    """The sync that creates every record, beside the floor: the median of
    `repeat` runs, the records each created removed (and vacuumed away) before
    the next, so that every run creates them all and commits, deferred checks
    included; the last run's records stay. Its query count."""
    from django.db import connection

    times = []
    for run in range(repeat):
        if run:
            with connection.cursor() as cursor:
                # Nothing refers to a fresh record but the console's change log.
                cursor.execute("SET session_replication_role = replica")
                cursor.execute("DELETE FROM sandboxes_retirement")
                cursor.execute("SET session_replication_role = origin")
                cursor.execute("VACUUM ANALYZE sandboxes_retirement")
        seconds, queries, _, first = timed(sync_retirements, 1)
        times.append(seconds)
    note = f"{first.created:,} created" + (
        f"; median of {repeat}: " + ", ".join(f"{t * 1000:.0f}" for t in times) + " ms"
        if repeat > 1
        else ""
    )
    line("first sync (target < 2x floor)", statistics.median(times), floor, queries, note)
    return queries


def floor_line(raw: int, nojit: float, jit: float) -> None:
    print(
        f"  {'floor: raw SQL count, JIT off':<38} {nojit * 1000:7.0f} ms"
        f"              {raw:,} rows; with JIT {jit * 1000:.0f} ms  ({load()})",
        flush=True,
    )


def old_fleet(sizes: list[int], repeat: int, counts: dict) -> None:
    from django.db import connection

    from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements

    raw_count, raw_count_without_jit = raw_counters()
    print("issue 4's fleet (~14 % candidates, bulk_create):", flush=True)
    for n in sizes:
        clear()
        started = time.perf_counter()
        build_fleet(n)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"\n{m_leases():,} leases built in {time.perf_counter() - started:.0f} s ({load()})")
        nojit, _, _, raw = timed(raw_count_without_jit, repeat)
        jit, _, _, _ = timed(raw_count, repeat)
        seconds, queries, _, evaluated = timed(evaluate_fleet, repeat)
        assert raw == len(evaluated), (raw, len(evaluated))
        floor_line(raw, nojit, jit)
        held = sum(1 for e in evaluated if e.blocking)
        line(
            "listing + holds (target < 1 s)",
            seconds,
            nojit,
            queries,
            f"{len(evaluated):,} candidates, {held:,} held",
        )
        first_queries = first_sync(sync_retirements, nojit)
        sync_seconds, sync_queries, writes, _ = timed(sync_retirements, repeat)
        line(
            "listing + holds + sync, unchanged",
            sync_seconds,
            nojit,
            sync_queries,
            f"{len(writes)} writes",
        )
        counts.setdefault("old fleet: listing + holds", {})[n] = queries
        counts.setdefault("old fleet: first sync", {})[n] = first_queries
        counts.setdefault("old fleet: listing + holds + sync", {})[n] = sync_queries


def year_fleet(sizes: list[int], repeat: int, per_kept: int, counts: dict) -> None:
    from unittest import mock

    from devtools.bench_fleet import build_fleet as build_year
    from sandboxes.models import ReconcilerPass, Retirement
    from sandboxes.reconciler import changes
    from sandboxes.reconciler.listing import evaluate_fleet, sync_retirements
    from sandboxes.reconciler.passes import run_pass

    raw_count, raw_count_without_jit = raw_counters()
    print("\na year of history (~95 % expired, COPY-loaded):", flush=True)
    for n in sizes:
        clear()
        started = time.perf_counter()
        stats = build_year(leases=n, kept=max(n // per_kept, 1))
        built = time.perf_counter() - started
        print(
            f"\n{stats.leases:,} leases ({stats.expired / stats.leases:.0%} expired), "
            f"{stats.kept_sandboxes:,} kept sandboxes; {sum(stats.rows.values()):,} rows "
            f"loaded in {built:.0f} s ({load()})",
            flush=True,
        )
        nojit, _, _, raw = timed(raw_count_without_jit, repeat)
        jit, _, _, _ = timed(raw_count, repeat)
        floor_line(raw, nojit, jit)
        seconds, queries, _, evaluated = timed(evaluate_fleet, repeat)
        assert raw == len(evaluated), (raw, len(evaluated))
        held = sum(1 for e in evaluated if e.blocking)
        line(
            "listing + holds",
            seconds,
            nojit,
            queries,
            f"{len(evaluated):,} candidates, {held:,} held",
        )
        first_queries = first_sync(sync_retirements, nojit, repeat)
        # A few operator holds, as an operator would leave them.
        for pk in Retirement.objects.values_list("pk", flat=True)[:: max(per_kept // 4, 1)][:50]:
            Retirement.objects.filter(pk=pk).update(operator_hold_reason="bench: keep for now")
        sync_retirements()
        sync_seconds, sync_queries, sync_writes, _ = timed(sync_retirements, repeat)
        line(
            "listing + holds + sync (target < 1 s)",
            sync_seconds,
            nojit,
            sync_queries,
            f"{len(sync_writes)} writes, unchanged fleet",
        )
        # A pass that lists in full on the unchanged fleet, then the no-change pass.
        with mock.patch.object(changes, "still_current", return_value=False):
            full_seconds, full_queries, full_writes, _ = timed(run_pass, repeat)
        run_pass()  # the passes above each left their listing behind; this one reuses it
        pass_seconds, pass_queries, pass_writes, record = timed(run_pass, repeat)
        other = [w for w in pass_writes + full_writes if "sandboxes_reconcilerpass" not in w]
        line("pass that lists, unchanged fleet", full_seconds, nojit, full_queries)
        line(
            "no-change pass (target < 300 ms)",
            pass_seconds,
            nojit,
            pass_queries,
            f"{len(pass_writes)} writes ({len(other)} besides its pass row), "
            f"listing reused: {record.listing.get('reused')}",
        )
        for w in other[:5]:
            print(f"    write: {w[:160]}")
        assert record.listing.get("reused"), record.listing
        assert not other, other
        assert ReconcilerPass.objects.count() == 2 * repeat + 1
        for label, q in (
            ("year fleet: listing + holds", queries),
            ("year fleet: first sync", first_queries),
            ("year fleet: listing + holds + sync", sync_queries),
            ("year fleet: pass that lists", full_queries),
            ("year fleet: no-change pass", pass_queries),
        ):
            counts.setdefault(label, {})[n] = q


def report_counts(counts: dict) -> None:
    print("\nqueries at each size (issue 16: the same at every size):")
    same = True
    for label, by_size in counts.items():
        values = set(by_size.values())
        same &= len(values) == 1
        sizes = ", ".join(f"{n:,}: {q}" for n, q in by_size.items())
        print(f"  {label:<36} {sizes}  {'same' if len(values) == 1 else 'DIFFERENT'}")
    assert same, counts


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
    print(f"reconciler listing benchmark, {time.strftime('%Y-%m-%d %H:%M:%S')} ({load()})")
    counts: dict = {}
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
        if sizes:
            old_fleet(sizes, args.repeat, counts)
        fleet = [int(s) for s in args.fleet.split(",") if s]
        if fleet:
            year_fleet(fleet, args.repeat, args.per_kept, counts)
        report_counts(counts)
    finally:
        if not args.keep:
            teardown(args.db)


def m_leases() -> int:
    from sandboxes.models import EnvironmentLease

    return EnvironmentLease.objects.count()


if __name__ == "__main__":
    main()
