"""Writing one page of mirrored rows into the console (docs/architecture.md, Mirror).

Each page is written in one console transaction with a fixed number of
queries (find missing references, create them as placeholders, upsert the
rows, insert receipts, upsert intents and exports, settle the ones whose
metadata key disappeared). Everything is idempotent: upserts by id, receipts
with ignore-on-conflict on (lease, kind, request id), intents and exports by
derived ids. A row that cannot be read is reported, counted by reason and
skipped; the mirror goes on.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from uuid import UUID

from django.db import connection, models, transaction
from django.utils import timezone
from psycopg import Cursor, sql

from sandboxes.logging import log_context
from sandboxes.models import (
    Agent,
    AuditEvent,
    Company,
    Environment,
    EnvironmentLease,
    ExecutionWorkspace,
    HeartbeatRun,
    Issue,
    LeaseIntent,
    PaperclipUser,
    PendingExport,
    Receipt,
    RecoveryAction,
)
from sandboxes.models.choices import (
    IntentKind,
    ReceiptKind,
    TerminationState,
)
from sandboxes.models.mirror import MirroredModel
from sandboxes.staging import uuid_array

from . import bulk
from .lease_metadata import export_id, intent_id
from .report import MirrorReport, Problem, TableCounts
from .tables import Table
from .translate import Malformed, Row, Save
from .values import NotASandbox

log = logging.getLogger(__name__)


# Every writer of a page takes its row locks in this order of tables, and in
# id order within each: placeholders of the tables before its own, its own
# rows, then placeholders of the tables after (the foreign keys are checked at
# commit). Mirror processes sharing a step (sync.py) then never wait on each
# other in a circle: an issue page and a lease page both create workspace
# placeholders and issue rows, and in the same order.
WRITE_ORDER: tuple[type[MirroredModel], ...] = (
    Company,
    PaperclipUser,
    Agent,
    Environment,
    Issue,
    ExecutionWorkspace,
    HeartbeatRun,
    EnvironmentLease,
    RecoveryAction,
)
_RANK = {model: rank for rank, model in enumerate(WRITE_ORDER)}


def _ensure_exist(refs: dict[type[MirroredModel], set[UUID]]) -> None:
    """Create rows named but not (yet) mirrored as placeholders, in ONE statement
    whatever the page's size or the number of models named: per model, an
    insert-or-nothing of every id named (ON CONFLICT DO NOTHING leaves a row
    already there untouched, placeholder or not). No lookup round trip and no
    set difference in Python: the unique index answers which ids are new.

    The models in WRITE_ORDER, each insert waiting for the one before it to
    finish (`bulk.placeholders` after=): PostgreSQL runs a statement's CTEs in
    no stated order of their own, and the order of the locks is the point."""
    named = sorted(
        ((model, list(ids)) for model, ids in refs.items() if ids),
        key=lambda named: _RANK[named[0]],
    )
    if not named:
        return
    inserts, params = [], []
    now = timezone.now()
    for i, (model, ids) in enumerate(named):
        statement, values = bulk.placeholders(model, ids, now, after=f"i{i - 1}" if i else None)
        inserts.append(sql.SQL("{} AS ({} RETURNING 1)").format(sql.Identifier(f"i{i}"), statement))
        params.extend(values)
    with Cursor(connection.connection) as cur:
        # Data-modifying CTEs all run, whether or not the outer query reads them.
        cur.execute(sql.SQL("WITH {} SELECT 1").format(sql.SQL(", ").join(inserts)), params)


def _upsert(model: type[models.Model], rows: list[Row]) -> list[Row]:
    """Upsert the page's rows; a row whose stored source time is newer than this
    reading is left alone (docs/architecture.md, how a lease travels: ingest and
    the mirror both write these tables and the newer source time wins, under the
    row lock the upsert takes). Returns the rows written."""
    if not rows:
        return rows
    fields = sorted({f for row in rows for f in row.fields})
    skipped = bulk.upsert(
        model,
        ({"id": row.pk, "placeholder": bool(row.quarantined), **row.fields} for row in rows),
        update=[*fields, "placeholder"],
        newer_only=True,
    ).skipped
    if not skipped:
        return rows
    left = set(skipped)
    return [row for row in rows if row.pk not in left]


def _fill_providers(rows: list[Row]) -> None:
    """environment_leases.provider is nullable: a lease without one is its
    environment's provider (config.provider, else its driver). 1 query."""
    missing = {row.fields["environment_id"] for row in rows if not row.fields["provider"]}
    if not missing:
        return
    known = dict(
        Environment.objects.filter(pk__in=missing, placeholder=False).values_list("pk", "provider")
    )
    for row in rows:
        if not row.fields["provider"]:
            # An unknown environment's provider is unknown: listed, never driven.
            row.fields["provider"] = known.get(row.fields["environment_id"]) or "unknown"


def _settle(rows: list[Row], report: MirrorReport) -> None:
    """Paperclip removes sandboxStopAndRetain / nativeWorkspaceExportResume when
    the stop settles (sandbox-stop-and-retain.ts settleStopOnlyCleanup,
    native-workspace-export-resume.ts): a mirrored intent or export whose key
    disappeared is settled. With a stop receipt beside it, it was confirmed
    (export done); without, it was withdrawn (cancelled / failed). 2 queries."""
    stopped, dropped_intents, dropped_exports = set(), set(), set()
    for row in rows:
        if row.quarantined:
            continue  # unreadable metadata says nothing about its keys
        if any(
            r["kind"] == ReceiptKind.STOP_AND_RETAIN or r["state"] == TerminationState.STOPPED
            for r in row.receipts
        ):
            stopped.add(row.pk)
        if not row.intents:
            dropped_intents.add(intent_id(row.pk, IntentKind.STOP_AND_RETAIN))
        if not row.exports:
            dropped_exports.add(export_id(row.pk))
    with Cursor(connection.connection) as cur:
        for table, ids, done, gone in (
            (LeaseIntent._meta.db_table, dropped_intents, "confirmed", "cancelled"),
            (PendingExport._meta.db_table, dropped_exports, "done", "failed"),
        ):
            if not ids:
                continue
            cur.execute(
                sql.SQL(
                    "UPDATE {} SET state = CASE WHEN lease_id = ANY(%s::uuid[])"
                    " THEN %s::text ELSE %s::text END, updated_at = %s"
                    " WHERE id = ANY(%s::uuid[]) AND state = 'pending'"
                ).format(sql.Identifier(table)),
                [uuid_array(stopped), done, gone, timezone.now(), uuid_array(ids)],
            )
            report.settled += cur.rowcount


def _moves(rows: list[Row], report: MirrorReport, counts: TableCounts) -> list[Row]:
    """A lease row names one sandbox; a reading naming another moves it, and only a
    reading newer than what the console holds may (docs/rules.md, proof). Returns
    the rows to write; a move that is not newer is skipped and reported, and each
    move that goes ahead is audited. 1 query (the rows locked), +1 for the audit."""
    with connection.cursor() as cursor:
        # The ids as one array literal: 5,000 uuids quoted one by one into the
        # statement's text (Django binds client-side) cost more than the query.
        cursor.execute(
            f"SELECT id, provider, provider_lease_id, source_updated_at"
            f" FROM {EnvironmentLease._meta.db_table}"
            " WHERE id = ANY(%s::uuid[]) AND NOT placeholder ORDER BY id FOR UPDATE",
            [uuid_array(row.pk for row in rows)],
        )
        held = {pk: (provider, sandbox, at) for pk, provider, sandbox, at in cursor.fetchall()}
    keep, moved = [], []
    for row in rows:
        if row.pk not in held:
            keep.append(row)
            continue
        provider, sandbox, at = held[row.pk]
        new = (row.fields["provider"], row.fields["provider_lease_id"])
        source_at = row.fields.get("source_updated_at")
        if new == (provider, sandbox) or (at and source_at and source_at < at):
            keep.append(row)  # no move, or an older reading the upsert leaves alone
        elif at is None or (source_at is not None and source_at > at):
            keep.append(row)
            moved.append((row, (provider, sandbox), at))
        else:
            _problem(
                report,
                counts,
                "environment_leases",
                row.pk,
                f"names sandbox {new[1]!r}, but the console holds it on {sandbox!r} from a "
                "reading at least as new: a lease moves to another sandbox only on a newer reading",
                kind="moves a lease to another sandbox without a newer reading",
            )
    _audit_moves(moved)
    return keep


def _audit_moves(moved: list) -> None:
    """Each lease a newer reading moved to another sandbox, in the audit trail
    (the record on the old sandbox closes on the next pass). 1 query."""
    if not moved:
        return
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor_label="mirror",
                action="lease.sandbox_moved",
                object_type="environmentlease",
                object_id=str(row.pk),
                sandbox_id=row.fields["provider_lease_id"],
                reason=f"a newer reading of Paperclip moved the lease from sandbox "
                f"{old[1]!r} to {row.fields['provider_lease_id']!r}",
                before={
                    "provider": old[0],
                    "provider_lease_id": old[1],
                    "source_updated_at": at.isoformat() if at else None,
                },
                after={
                    "provider": row.fields["provider"],
                    "provider_lease_id": row.fields["provider_lease_id"],
                    "source_updated_at": _iso(row.fields.get("source_updated_at")),
                },
            )
            for row, old, at in moved
        ]
    )


def _iso(value) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def _write_rows(rows: list[Row], report: MirrorReport, counts: TableCounts) -> int:
    model = rows[0].model
    if model is EnvironmentLease:
        _fill_providers(rows)
        rows = _moves(rows, report, counts)
        if not rows:
            return 0
    refs: dict[type[MirroredModel], set[UUID]] = {}
    for row in rows:
        for ref_model, ids in row.refs.items():
            refs.setdefault(ref_model, set()).update(ids)
    refs[model] = refs.get(model, set()) - {row.pk for row in rows}
    # Rows of its own table it names (not on this page) go with the tables before.
    rank = _RANK[model]
    _ensure_exist({m: ids for m, ids in refs.items() if _RANK[m] <= rank})
    fresh = _upsert(model, rows)
    _ensure_exist({m: ids for m, ids in refs.items() if _RANK[m] > rank})

    receipts = [
        {"id": uuid.uuid4(), "actor": "paperclip", **r} for row in rows for r in row.receipts
    ]
    if receipts:
        report.receipts += bulk.upsert(
            Receipt, receipts, update=None, conflict=("lease_id", "kind", "request_id")
        ).written
    intents = [{"placeholder": False, **i} for row in fresh for i in row.intents]
    if intents:
        bulk.upsert(
            LeaseIntent,
            intents,
            update=["company_id", "lease_id", "kind", "state", "request_id", "placeholder"],
        )
        report.intents += len(intents)
    exports = [{"placeholder": False, **e} for row in fresh for e in row.exports]
    if exports:
        bulk.upsert(
            PendingExport, exports, update=["company_id", "lease_id", "state", "placeholder"]
        )
        report.intents += len(exports)
    if model is EnvironmentLease:
        _settle(fresh, report)
    return len(fresh)


def _write_saves(saves: list[Save], counts: TableCounts, report: MirrorReport) -> None:
    """A committed save becomes the durable save of its sandbox's workspace; an
    older one never overwrites a newer one. The sandbox is found by the
    manifest's leaseId, else by its sandboxKey (the provider's sandbox id; the
    newest lease on it). 3 queries and one bulk update."""
    by_id = dict(
        EnvironmentLease.objects.filter(
            pk__in={s.lease_id for s in saves if s.lease_id}
        ).values_list("pk", "execution_workspace_id")
    )
    keys = {s.sandbox_key for s in saves if s.sandbox_key and s.lease_id not in by_id}
    by_key: dict[str, UUID | None] = {}
    if keys:
        for key, workspace_id in (
            EnvironmentLease.objects.filter(provider_lease_id__in=keys)
            .order_by("provider_lease_id", "-acquired_at")
            .values_list("provider_lease_id", "execution_workspace_id")
        ):
            by_key.setdefault(key, workspace_id)
    workspace_of = {
        s.run_id: (by_id[s.lease_id] if s.lease_id in by_id else by_key.get(s.sandbox_key))
        for s in saves
    }
    # Keyed by UUID | None: a save whose sandbox has no workspace looks up None.
    workspaces: dict[UUID | None, ExecutionWorkspace] = {
        ws.pk: ws
        for ws in ExecutionWorkspace.objects.filter(
            pk__in={w for w in workspace_of.values() if w is not None}
        )
    }
    changed: dict[UUID, ExecutionWorkspace] = {}
    now = timezone.now()
    for save in sorted(saves, key=lambda s: s.saved_at or now):
        ws = workspaces.get(workspace_of[save.run_id])
        if ws is None:
            _problem(
                report,
                counts,
                "work_folder_runs",
                save.run_id,
                f"lease {save.lease_id or save.sandbox_key} is unknown or has no workspace",
                kind="names an unknown lease or one without a workspace",
            )
            continue
        if save.saved_at and ws.saved_at and save.saved_at < ws.saved_at:
            counts.applied += 1  # an older save: the newer one stands
            continue
        ws.save_state = save.state
        ws.updated_at = now
        if save.manifest is not None:
            ws.saved_manifest = save.manifest
            ws.saved_at = save.saved_at
            ws.final_checkpoint_at = save.final_checkpoint_at
        changed[ws.pk] = ws
        counts.applied += 1
    if changed:
        ExecutionWorkspace.objects.bulk_update(
            list(changed.values()),
            ["save_state", "saved_manifest", "saved_at", "final_checkpoint_at", "updated_at"],
        )


def _problem(report, counts, table, row_id, reason, action="skipped", kind="") -> None:
    report.problems.append(Problem(table, str(row_id), reason, action, kind))
    if action == "skipped":
        counts.skipped += 1
    else:
        counts.quarantined += 1
    lease_id = str(row_id) if table == "environment_leases" else None
    with log_context(lease_id=lease_id):
        log.warning("mirror: %s row %s %s: %s", table, row_id, action, reason)


def translate_page(table: Table, page: list[dict], report: MirrorReport) -> list:
    """The page's source rows as console rows (or saves); a row that cannot be
    read is counted and reported in `report`."""
    counts = report.tables.setdefault(table.name, TableCounts())
    counts.read += len(page)
    translated = []
    for src in page:
        try:
            out = table.translate(src)
        except NotASandbox:
            counts.not_sandbox += 1
            continue
        except Malformed as exc:
            _problem(report, counts, table.name, src.get(table.pk), str(exc), kind=exc.kind)
            continue
        for row in out if isinstance(out, list) else [out]:
            if isinstance(row, Row) and isinstance(src.get("updated_at"), datetime):
                # The source time of what the mirror writes, as ingest records an
                # event's occurred_at: the newer of the two writers wins.
                row.fields["source_updated_at"] = src["updated_at"]
            translated.append(row)
    return translated


def write_translated(table: Table, translated: list, report: MirrorReport) -> None:
    """Write one translated page in one console transaction."""
    counts = report.tables.setdefault(table.name, TableCounts())
    with transaction.atomic():
        if table.name == "work_folder_runs":
            _write_saves(translated, counts, report)
            return
        quarantined = 0
        for row in translated:
            if row.quarantined:
                quarantined += 1
                _problem(
                    report,
                    counts,
                    table.name,
                    row.pk,
                    row.quarantined,
                    "quarantined",
                    row.quarantine_kind,
                )
        written = _write_rows(translated, report, counts)
        counts.applied += max(0, written - quarantined)


# A page's transaction chosen as a deadlock's victim is written again, up to
# this many times in all: mirror processes (sync.py) may each wait on rows
# the other's page has just inserted (a placeholder and its row).
WRITE_ATTEMPTS = 3


def apply_page(table: Table, page: list[dict], report: MirrorReport) -> None:
    translated = translate_page(table, page, report)
    if not translated:
        return
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        # What the write counts and reports is kept only if it commits.
        written = MirrorReport()
        try:
            write_translated(table, translated, written)
        except Exception as exc:
            if attempt == WRITE_ATTEMPTS or connection.in_atomic_block or not _deadlock(exc):
                raise
            log.warning("mirror: a %s page lost a deadlock; writing it again", table.name)
            report.deadlocks += 1
            continue
        report.merge(written)
        return


def _deadlock(exc: BaseException) -> bool:
    """PostgreSQL chose this transaction as a deadlock's victim (40P01), as
    psycopg raises it or as Django wraps it."""
    return any(
        getattr(e, "sqlstate", None) == "40P01" for e in (exc, exc.__cause__) if e is not None
    )
