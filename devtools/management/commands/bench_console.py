"""Benchmark the console's pages on a large fleet, beside the Django admin's
EnvironmentLease changelist on the same data.

Runs in a throwaway database (`bench_<name>`, made by Django's test-database machinery),
so the configured database is never touched:

    DJANGO_SETTINGS_MODULE=paperclip_console.test_settings \\
        .venv/bin/python manage.py bench_console
"""

import os
import statistics
import time
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test import Client
from django.test.utils import (
    CaptureQueriesContext,
    setup_test_environment,
    teardown_test_environment,
)
from django.utils import timezone

from sandboxes import models as m
from sandboxes.models.choices import ReceiptKind, RetirementKind, Stage

BATCH = 5000
LEASE_BATCH = 500
# Every console page at or under the admin changelist, in at most this many
# queries (README, Benchmarks and chaos runs).
MAX_QUERIES = 12


def _load(leases: int, retirements: int, stdout) -> m.Retirement:
    now = timezone.now()
    envs = m.Environment.objects.bulk_create(
        [m.Environment(name=f"bench-{i}", provider="local") for i in range(10)]
    )
    issues = m.Issue.objects.bulk_create(
        [m.Issue(key=f"PAP-{i}", title=f"task {i}", status="done") for i in range(leases // 5)],
        batch_size=BATCH,
    )
    runs = m.HeartbeatRun.objects.bulk_create(
        [
            m.HeartbeatRun(issue=issues[i % len(issues)], status="failed")
            for i in range(retirements)
        ],
        batch_size=BATCH,
    )
    rows = []
    for i in range(leases):
        rows.append(
            m.EnvironmentLease(
                environment=envs[i % len(envs)],
                issue=issues[i % len(issues)],
                heartbeat_run=runs[i] if i < retirements else None,
                status="released" if i % 3 else "expired",
                lease_policy="reuse_by_environment",
                provider="local",
                provider_lease_id=f"sbx-{i:07d}",
                acquired_at=now - timedelta(minutes=i),
                released_at=now - timedelta(minutes=i - 1),
            )
        )
    # One transaction per batch: a lease insert takes one advisory lock per
    # sandbox (the console_lease_superseded trigger) until its transaction ends,
    # and one bulk_create (a single transaction) of 100,000 rows runs out of
    # PostgreSQL's lock table (max_locks_per_transaction).
    lease_rows = []
    for start in range(0, len(rows), LEASE_BATCH):
        lease_rows += m.EnvironmentLease.objects.bulk_create(rows[start : start + LEASE_BATCH])
    stdout.write(f"  {len(lease_rows)} leases")
    stages, kinds = list(Stage.values), list(RetirementKind.values)
    ret_rows = m.Retirement.objects.bulk_create(
        [
            m.Retirement(
                lease=lease_rows[i],
                environment=lease_rows[i].environment,
                provider="local",
                provider_lease_id=lease_rows[i].provider_lease_id,
                kind=kinds[i % len(kinds)],
                stage=stages[i % len(stages)],
                holds=["retention"] if i % 4 == 0 else [],
                needs_attention=i % 50 == 0,
                size_bytes=1000 * i if i % 2 else None,
            )
            for i in range(retirements)
        ],
        batch_size=BATCH,
    )
    stdout.write(f"  {len(ret_rows)} retirements")
    return _decorate(ret_rows, now)


def _decorate(ret_rows: list, now) -> m.Retirement:
    """Receipts and audit rows for every record, and 500 passes; returns a record
    awaiting approval (the detail page's sample)."""
    m.Receipt.objects.bulk_create(
        [
            m.Receipt(
                kind=ReceiptKind.SALVAGE_COMPARE,
                lease=r.lease,
                run_id=r.lease.heartbeat_run_id,
                retirement=r,
                provider_lease_id=r.provider_lease_id,
                confirmed_at=now,
                request_id=uuid.uuid4().hex,
                payload={"clean": True, "added": [], "changed": [], "deleted": []},
                actor="system",
            )
            for r in ret_rows
        ],
        batch_size=BATCH,
    )
    m.AuditEvent.objects.bulk_create(
        [
            m.AuditEvent(
                actor_label="bench",
                action="retirement.hold",
                object_type="retirement",
                object_id=str(r.pk),
                sandbox_id=r.provider_lease_id,
                reason="bench",
            )
            for r in ret_rows
        ],
        batch_size=BATCH,
    )
    m.ReconcilerPass.objects.bulk_create(
        [
            m.ReconcilerPass(
                started_at=now - timedelta(minutes=5 * i),
                finished_at=now - timedelta(minutes=5 * i) + timedelta(seconds=4),
                candidates=max(len(ret_rows) - i, 0),
                retired=i % 5,
            )
            for i in range(500)
        ]
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return next(r for r in ret_rows if r.stage == Stage.AWAITING_APPROVAL)


def _load_fleet(leases: int, stdout) -> m.Retirement:
    """A year of history (devtools.bench_fleet: ~95 % expired, one kept sandbox
    per 200 rows), listed by the reconciler, with records in every stage."""
    from devtools.bench_fleet import build_fleet
    from sandboxes.reconciler.listing import sync_retirements

    now = timezone.now()
    stats = build_fleet(leases=leases, kept=max(leases // 200, 10))
    stdout.write(f"  {stats.leases} leases ({stats.expired} expired), {stats.kept_sandboxes} kept")
    sync_retirements(now=now)
    stages = [Stage.LISTED, Stage.HELD, Stage.AWAITING_APPROVAL, Stage.FAILED, Stage.COMPARING]
    ids = list(m.Retirement.objects.order_by("pk").values_list("pk", flat=True))
    for k, stage in enumerate(stages):
        m.Retirement.objects.filter(pk__in=ids[k :: len(stages) * 2]).update(stage=stage)
    m.Retirement.objects.filter(pk__in=ids[::50]).update(needs_attention=True)
    ret_rows = list(m.Retirement.objects.select_related("lease"))
    stdout.write(f"  {len(ret_rows)} retirements")
    return _decorate(ret_rows, now)


def _median_ms(client: Client, url: str, runs: int, **headers) -> tuple[float, int, int]:
    with CaptureQueriesContext(connection) as ctx:
        status = client.get(url, **headers).status_code  # warm caches
    queries = len(ctx.captured_queries)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        status = client.get(url, **headers).status_code
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), status, queries


class Command(BaseCommand):
    help = "Time each console page on 100,000 leases and 10,000 retirements (throwaway DB)."

    def add_arguments(self, parser):
        parser.add_argument("--leases", type=int, default=100_000)
        parser.add_argument("--retirements", type=int, default=10_000)
        parser.add_argument("--runs", type=int, default=15)
        parser.add_argument(
            "--fleet",
            type=int,
            default=0,
            help="Instead: a year of history with this many lease rows, COPY-loaded "
            "(~95 %% expired, one kept sandbox per 200 rows), listed by the reconciler.",
        )

    def handle(self, *args, leases, retirements, runs, fleet, **options):
        from django.contrib.auth import get_user_model

        from sandboxes.roles import ADMINS
        from sandboxes.views.common import live_fingerprint
        from sandboxes.views.sandboxes import detail_fingerprint

        setup_test_environment()
        old_name = connection.settings_dict["NAME"]
        # Its own name, so a test run using test_<name> at the same time is never clobbered.
        connection.settings_dict.setdefault("TEST", {})["NAME"] = f"bench_{old_name}"
        connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
        try:
            self.stdout.write(f"Loading into {connection.settings_dict['NAME']} …")
            started = time.perf_counter()
            if fleet:
                sample = _load_fleet(fleet, self.stdout)
            else:
                sample = _load(leases, retirements, self.stdout)
            self.stdout.write(f"  loaded in {time.perf_counter() - started:.1f} s")
            user = get_user_model().objects.create_superuser("bench", password="x")
            from django.contrib.auth.models import Group

            user.groups.add(Group.objects.get(name=ADMINS))
            client = Client()
            client.force_login(user)
            hx = {"HTTP_HX_REQUEST": "true"}
            fp = live_fingerprint()
            pages = [
                ("admin changelist: EnvironmentLease", "/admin/sandboxes/environmentlease/", {}),
                ("dashboard", "/", {}),
                ("dashboard poll, unchanged (204)", f"/?fp={fp}", hx),
                ("dashboard poll, changed (fragment)", "/?fp=stale", hx),
                ("kept-sandbox list", "/sandboxes/", {}),
                ("kept-sandbox list, hold+search", "/sandboxes/?hold=retention&q=sbx-00", {}),
                ("kept-sandbox list, all stages", "/sandboxes/?stage=all", {}),
                ("sandbox detail", f"/sandboxes/{sample.pk}/", {}),
                ("sandbox detail by provider id", f"/sandboxes/{sample.provider_lease_id}/", {}),
                (
                    "sandbox detail poll, unchanged (204)",
                    f"/sandboxes/{sample.pk}/?part=live&fp={detail_fingerprint(sample)}",
                    hx,
                ),
                ("task", f"/tasks/{sample.lease.issue_id}/", {}),
                ("approvals queue", "/approvals/", {}),
                ("audit trail", "/audit/", {}),
                ("reconciler passes", "/passes/", {}),
                ("audit trail, one action", "/audit/?action=retirement.hold", {}),
                ("dashboard, split by environment", "/?split=environment", {}),
                ("environments", "/environments/", {}),
                ("users", "/users/", {}),
            ]
            self.stdout.write(f"\nmedian of {runs} requests (in-process, ms):")
            baseline = None
            failed = []
            for label, url, headers in pages:
                ms, status, queries = _median_ms(client, url, runs, **headers)
                verdict = ""
                if baseline is None:
                    baseline = ms  # the admin changelist: the floor
                else:
                    ok = ms <= baseline and queries <= MAX_QUERIES and status < 400
                    verdict = "ok" if ok else "OVER"
                    if not ok:
                        failed.append(label)
                load = " ".join(f"{x:.1f}" for x in os.getloadavg())
                self.stdout.write(
                    f"  {label:<40} {ms:8.1f} ms  ({ms / baseline:4.2f}× changelist)  "
                    f"{queries:3} queries  [{status}] {verdict:<4} (load {load})"
                )
            self.stdout.write(
                f"\n{len(pages) - 1 - len(failed)} of {len(pages) - 1} pages at or under the "
                f"changelist in at most {MAX_QUERIES} queries"
                + (f"; over: {', '.join(failed)}" if failed else "")
            )
            if failed:
                raise CommandError(f"pages over the changelist or {MAX_QUERIES} queries: {failed}")
        finally:
            connection.creation.destroy_test_db(old_name, verbosity=0)
            teardown_test_environment()
