"""A realistic fleet for benchmarks: a year of Paperclip history, loaded with COPY.

Lease rows accumulate for ever: most are `expired` history (ephemeral sandboxes
destroyed after their run, reused sandboxes destroyed later), some old rows
stay `released` or `failed` on sandboxes that a newer row superseded, and only
a few thousand sandboxes are kept at any time. The kept ones cover every
candidate kind and every hold the listing can see, plus kept sandboxes that are
not candidates (a resumable warm sandbox, a lease in use, an open restore).

Everything is written with PostgreSQL COPY (psycopg 3) in one transaction, so a
million leases load in about a minute on a small machine. Columns the builder
does not set get their model default, so new nullable or defaulted columns do
not break it.

    from devtools.bench_fleet import build_fleet
    stats = build_fleet(leases=1_000_000, kept=5_000)
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from sandboxes import models as m

# Fraction of all lease rows that are `expired` history.
EXPIRED_SHARE = 0.95
CHUNK = 20_000  # rows per COPY write


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _text(value: Any) -> str:
    """One value in COPY's text format."""
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()} seconds"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, separators=(",", ":"))
    value = str(value)
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = value.translate(_COPY_ESCAPES)
    return value


class _Table:
    """COPY rows into one model's table; unset columns get the model default."""

    def __init__(self, model: type[models.Model], now: datetime):
        self.model = model
        fields = model._meta.concrete_fields
        self.columns = [f.column for f in fields]
        self.position = {f.attname: i for i, f in enumerate(fields)}
        template = []
        for f in fields:
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                template.append(_text(now))
            elif f.primary_key:
                template.append(None)  # always given
            else:
                template.append(_text(f.get_default()))
        self.template = template
        self.pending: list[str] = []
        self.count = 0

    def add(self, **values) -> None:
        row = self.template.copy()
        position = self.position
        for name, value in values.items():
            # Ids are hex strings already: most values need no conversion.
            row[position[name]] = value if type(value) is str else _text(value)
        self.pending.append("\t".join(row))
        self.count += 1

    def flush(self, cursor, force: bool = False) -> None:
        if not self.pending or (len(self.pending) < CHUNK and not force):
            return
        table = self.model._meta.db_table
        columns = ", ".join(f'"{c}"' for c in self.columns)
        with cursor.copy(f'COPY "{table}" ({columns}) FROM STDIN') as copy:
            copy.write("\n".join(self.pending) + "\n")
        self.pending.clear()


def _uuid(rng: random.Random) -> str:
    """A random id as 32 hex digits (PostgreSQL reads that as a uuid)."""
    return f"{rng.getrandbits(128):032x}"


# Kept sandboxes: (weight, shape). Each shape is one newest lease row whose kind
# (or reason not to be a candidate) is known; holds are sprinkled on top.
KEPT_SHAPES: list[tuple[int, str]] = [
    (14, "abandoned_released"),  # released warm lease, task bound elsewhere, stopped
    (6, "abandoned_failed"),  # failed warm lease, stopped
    (4, "abandoned_no_receipt"),  # no confirmed stop yet: no_stop_receipt
    (6, "superseded"),  # retained (running) warm lease, task bound elsewhere
    (8, "restore_closed"),  # retain_on_failure, its recovery action resolved
    (3, "restore_open"),  # retain_on_failure, recovery action active: not a candidate
    (10, "done_warm"),  # done task, warm lease released days ago
    (6, "done_warm_retention"),  # released an hour ago: retention
    (2, "done_warm_undated"),  # no released_at: unknown_age
    (4, "resume_failed"),  # pending_cleanup after a replacement
    (4, "stop_after_unsuccessful"),  # timed-out run's sandbox kept running
    (20, "resumable"),  # task bound here and not done: not a candidate
    (13, "active"),  # in use by a live run: not a candidate
]
# Hold sprinkles on kept sandboxes: (probability, hold fact).
SPRINKLES: list[tuple[float, str]] = [
    (0.03, "export_pending"),
    (0.03, "intent_pending"),
    (0.03, "issue_run_active"),
    (0.03, "recovery_open_issue"),
    (0.03, "sandbox_shared"),
    (0.03, "writer_active"),
    (0.02, "run_active"),
    (0.01, "undated"),
]


@dataclass
class FleetStats:
    leases: int = 0
    expired: int = 0
    kept_sandboxes: int = 0
    history_sandboxes: int = 0
    rows: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    environment_ids: list = field(default_factory=list)


class _Builder:
    def __init__(self, rng: random.Random, now: datetime, prefix: str = "sbx"):
        self.rng = rng
        self.prefix = prefix
        self.now = now
        self.t = {
            model: _Table(model, now)
            for model in (
                m.Environment,
                m.Issue,
                m.ExecutionWorkspace,
                m.HeartbeatRun,
                m.EnvironmentLease,
                m.Receipt,
                m.RecoveryAction,
                m.PendingExport,
                m.LeaseIntent,
            )
        }
        self.sandbox_seq = 0
        self.expired = 0
        self.sandbox_rows: list[dict] = []

    def id(self) -> str:
        return _uuid(self.rng)

    def sandbox_id(self) -> str:
        self.sandbox_seq += 1
        return f"{self.prefix}-{self.sandbox_seq:08d}"

    def issue(self, status: str, bound_workspace=None, key: str = "") -> str:
        pk = self.id()
        self.t[m.Issue].add(
            id=pk,
            key=key or f"PAP-{self.t[m.Issue].count + 1}",
            title="bench task",
            status=status,
            bound_workspace_id=bound_workspace,
            source_updated_at=self.now,
        )
        return pk

    def run(self, issue_id, status: str, at: datetime) -> str:
        pk = self.id()
        self.t[m.HeartbeatRun].add(
            id=pk,
            issue_id=issue_id,
            status=status,
            started_at=at,
            finished_at=None if status in ("queued", "running", "scheduled_retry") else at,
            source_updated_at=at,
        )
        return pk

    def lease(self, **values) -> str:
        """Queue a lease row of the current sandbox (written by end_sandbox)."""
        pk = self.id()
        if values.get("status") == "expired":
            self.expired += 1
        values.setdefault("source_updated_at", values.get("acquired_at") or self.now)
        self.sandbox_rows.append({"id": pk, "provider": "daytona", **values})
        return pk

    def end_sandbox(self) -> None:
        """Write the sandbox's rows with `superseded` as the database keeps it
        (migration 0009): another row has a strictly later, known acquired_at.
        The load bypasses triggers, so the builder sets the flag itself."""
        dated = [r["acquired_at"] for r in self.sandbox_rows if r.get("acquired_at")]
        newest = max(dated, default=None)
        for row in self.sandbox_rows:
            at = row.get("acquired_at")
            row["superseded"] = at is not None and newest is not None and at < newest
            self.t[m.EnvironmentLease].add(**row)
        self.sandbox_rows.clear()

    def receipt(self, lease_id, run_id, sandbox, at, *, kind="termination", state="stopped"):
        self.t[m.Receipt].add(
            id=self.id(),
            kind=kind,
            state=state,
            lease_id=lease_id,
            run_id=run_id,
            provider_lease_id=sandbox,
            schema=m.choices.RECEIPT_SCHEMAS[kind],
            confirmed_at=at,
            request_id=f"req-{self.t[m.Receipt].count}",
            payload={},
            actor="paperclip",
        )

    def flush(self, cursor, force=False):
        for table in self.t.values():
            table.flush(cursor, force)


def _kept_sandbox(b: _Builder, env_id, shape: str, sprinkles: set[str]) -> None:
    rng, now = b.rng, b.now
    sandbox = b.sandbox_id()
    done = shape.startswith("done_warm") or shape == "restore_closed"
    issue_status = "done" if done else rng.choice(["in_progress", "todo", "in_review"])
    here_ws, other_ws = b.id(), b.id()
    bound_elsewhere = shape in ("abandoned_released", "abandoned_no_receipt", "superseded")
    issue = b.issue(issue_status, bound_workspace=other_ws if bound_elsewhere else here_ws)
    acquired = now - timedelta(hours=rng.randint(3, 24 * 14))
    run_status = {
        "abandoned_failed": "failed",
        "restore_closed": "failed",
        "restore_open": "failed",
        "stop_after_unsuccessful": "timed_out",
        "active": "running",
    }.get(shape, "succeeded")
    if "run_active" in sprinkles and shape not in ("superseded", "stop_after_unsuccessful"):
        run_status = "running"
    run = b.run(issue, run_status, acquired)
    writer = run if "writer_active" in sprinkles else None
    for pk in (here_ws, other_ws):
        b.t[m.ExecutionWorkspace].add(
            id=pk,
            issue_id=issue,
            save_state="saved",
            saved_at=now - timedelta(days=1),
            writer_run_id=writer if pk == here_ws else None,
            saved_manifest={"README.md": {"sha256": "0" * 64, "size": 7}},
        )
    policy, status, disposition, failure = "reuse_by_environment", "released", "stop_and_retain", ""
    released_at: datetime | None = acquired + timedelta(minutes=30)
    receipt = True
    match shape:
        case "abandoned_failed":
            status = "failed"
        case "abandoned_no_receipt":
            receipt = False
        case "superseded":
            status, disposition, receipt = "retained", "keep_running", False
        case "restore_closed" | "restore_open":
            policy, status = "retain_on_failure", "failed"
        case "done_warm":
            policy = "reuse_by_execution_workspace"
            released_at = now - timedelta(days=rng.randint(2, 10))
        case "done_warm_retention":
            released_at = now - timedelta(hours=1)
        case "done_warm_undated":
            released_at = None
        case "resume_failed":
            status, failure = "pending_cleanup", "resume_failed"
        case "stop_after_unsuccessful":
            status, disposition, receipt = "retained", "keep_running", False
        case "active":
            status, disposition, released_at, receipt = "active", None, None, False
    # Older rows on the same sandbox, in its past: reused turns, now expired or
    # left as Paperclip wrote them.
    for back in range(rng.choice([0, 0, 1, 2, 3])):
        old_at = acquired - timedelta(days=back + 1, hours=rng.randint(0, 20))
        old_run = b.run(issue, "succeeded", old_at)
        b.lease(
            environment_id=env_id,
            issue_id=issue,
            execution_workspace_id=here_ws,
            heartbeat_run_id=old_run,
            status=rng.choice(["expired", "expired", "released", "failed"]),
            lease_policy=policy,
            provider_lease_id=sandbox,
            acquired_at=old_at,
            released_at=old_at + timedelta(minutes=20),
            disposition="stop_and_retain",
        )
    undated = "undated" in sprinkles
    lease = b.lease(
        environment_id=env_id,
        issue_id=issue,
        execution_workspace_id=here_ws,
        heartbeat_run_id=run,
        status=status,
        lease_policy=policy,
        provider_lease_id=sandbox,
        acquired_at=None if undated else acquired,
        released_at=released_at,
        disposition=disposition,
        failure_reason=failure,
    )
    if receipt:
        b.receipt(lease, run, sandbox, released_at or acquired)
    if shape in ("restore_closed", "restore_open"):
        b.t[m.RecoveryAction].add(
            id=b.id(),
            source_issue_id=issue,
            lease_id=lease,
            kind="workspace_restore",
            status="resolved" if shape == "restore_closed" else "active",
            evidence={"leaseId": str(uuid.UUID(lease))},
        )
    if "recovery_open_issue" in sprinkles:
        b.t[m.RecoveryAction].add(
            id=b.id(), source_issue_id=issue, kind="workspace_restore", status="active"
        )
    if "export_pending" in sprinkles:
        b.t[m.PendingExport].add(id=b.id(), lease_id=lease, state="pending")
    if "intent_pending" in sprinkles:
        b.t[m.LeaseIntent].add(
            id=b.id(), lease_id=lease, kind="restore", state="pending", request_id="bench"
        )
    if "issue_run_active" in sprinkles:
        b.run(issue, "queued", now)
    if "sandbox_shared" in sprinkles:
        # An older row on the same sandbox still says `retained`.
        old_at = acquired - timedelta(days=20)
        b.lease(
            environment_id=env_id,
            issue_id=issue,
            execution_workspace_id=here_ws,
            heartbeat_run_id=b.run(issue, "succeeded", old_at),
            status="retained",
            lease_policy=policy,
            provider_lease_id=sandbox,
            acquired_at=old_at,
        )
    b.end_sandbox()


def _history_sandbox(b: _Builder, env_id, issue, ws, rows: int, live_share: float) -> None:
    """A sandbox that is gone: its newest row is `expired`; older rows are
    expired too, or still `released` / `failed` as Paperclip left them."""
    rng, now = b.rng, b.now
    sandbox = b.sandbox_id()
    ephemeral = rows == 1 and rng.random() < 0.8
    newest = now - timedelta(days=15, minutes=rng.randint(0, 350 * 24 * 60))
    for k in range(rows):
        at = newest - timedelta(days=k, minutes=rng.randint(0, 600))
        newest_row = k == 0
        status = "expired"
        if not newest_row and rng.random() < live_share:
            status = rng.choice(["released", "released", "failed"])
        run = b.run(issue, rng.choice(["succeeded"] * 8 + ["failed", "cancelled"]), at)
        lease = b.lease(
            environment_id=env_id,
            issue_id=issue,
            execution_workspace_id=ws,
            heartbeat_run_id=run,
            status=status,
            lease_policy="ephemeral" if ephemeral else "reuse_by_environment",
            provider_lease_id=sandbox,
            acquired_at=at,
            released_at=at + timedelta(minutes=rng.randint(5, 90)),
            cleanup_status="success" if status == "expired" else None,
            disposition="destroy" if status == "expired" else "stop_and_retain",
        )
        if newest_row and rng.random() < 0.4:
            b.receipt(lease, run, sandbox, at, state="destroyed")
    b.end_sandbox()


_SECONDARY_INDEXES = """
SELECT ci.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i
JOIN pg_class ct ON ct.oid = i.indrelid
JOIN pg_class ci ON ci.oid = i.indexrelid
WHERE ct.relname = ANY(%s)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
"""


def _drop_secondary_indexes(cursor, tables: list[str]) -> list[str]:
    """Drop the indexes no constraint needs and return their definitions: a bulk
    load then builds each index once, sorted, instead of row by row."""
    cursor.execute(_SECONDARY_INDEXES, [tables])
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    return [definition for _, definition in indexes]


def build_fleet(
    *,
    leases: int = 1_000_000,
    kept: int = 5_000,
    seed: int = 16,
    environments: int = 4,
    prefix: str = "sbx",
) -> FleetStats:
    """Load a fleet of about `leases` lease rows (~95 % expired) with `kept` kept
    sandboxes into the default database (PostgreSQL), then ANALYZE. Sandbox ids
    are `<prefix>-<n>`: two fleets in one database need two prefixes."""
    if connection.vendor != "postgresql":
        raise RuntimeError("the benchmark fleet is loaded with PostgreSQL COPY")
    rng = random.Random(seed)
    now = timezone.now()
    b = _Builder(rng, now, prefix)
    stats = FleetStats()
    env_ids = [b.id() for _ in range(environments)]
    for i, pk in enumerate(env_ids):
        b.t[m.Environment].add(
            id=pk, name=f"bench-{i}", provider="daytona", retirement_mode="observe"
        )
    stats.environment_ids = [uuid.UUID(pk) for pk in env_ids]
    weights, shapes = zip(*KEPT_SHAPES, strict=True)
    with transaction.atomic(), connection.cursor() as cursor:
        # The builder writes consistent ids; skip per-row FK triggers (superuser).
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        indexes = _drop_secondary_indexes(cursor, [model._meta.db_table for model in b.t])
        for _ in range(kept):
            shape = rng.choices(shapes, weights)[0]
            sprinkles = {name for p, name in SPRINKLES if rng.random() < p}
            if shape == "active":
                sprinkles.discard("undated")
            stats.shapes[shape] = stats.shapes.get(shape, 0) + 1
            _kept_sandbox(b, rng.choice(env_ids), shape, sprinkles)
            b.flush(cursor)
        kept_rows = b.t[m.EnvironmentLease].count
        # History fills the rest: ~95 % of all rows expired. The non-expired
        # history rows are old rows that newer ones superseded.
        remaining = max(leases - kept_rows, 0)
        live_target = max(int(leases * (1 - EXPIRED_SHARE)) - (kept_rows - b.expired), 0)
        # A gone sandbox has one row (70 %) or 2-5 rows (mean 3.5): 0.75 older
        # rows per 1.75 rows, and a share of those older rows stays live.
        multi_share = 0.3
        older_rows = remaining * 0.75 / 1.75
        live_share = min(live_target / older_rows, 1.0) if older_rows else 0.0
        while remaining > 0:
            rows = 1 if rng.random() >= multi_share else rng.randint(2, 5)
            rows = min(rows, remaining)
            # One task per ~3 sandboxes, one workspace per task.
            if stats.history_sandboxes % 3 == 0:
                ws = b.id()
                issue = b.issue(rng.choice(["done"] * 9 + ["cancelled"]), bound_workspace=ws)
                b.t[m.ExecutionWorkspace].add(
                    id=ws, issue_id=issue, save_state="saved", saved_at=now
                )
            _history_sandbox(b, rng.choice(env_ids), issue, ws, rows, live_share)
            stats.history_sandboxes += 1
            remaining -= rows
            b.flush(cursor)
        b.flush(cursor, force=True)
        for definition in indexes:
            cursor.execute(definition)
        # SET LOCAL lasts until the outermost transaction ends (a test's).
        cursor.execute("SET LOCAL session_replication_role = origin")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    stats.leases = b.t[m.EnvironmentLease].count
    stats.expired = b.expired
    stats.kept_sandboxes = kept
    stats.rows = {model.__name__: table.count for model, table in b.t.items()}
    return stats
