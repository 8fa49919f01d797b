"""One mirror iteration: read changed Paperclip rows, upsert console rows in bulk.

Tables are read in dependency order inside one read-only snapshot; each page
is written in one console transaction with a fixed number of queries (find
missing references, create them as placeholders, upsert the rows, insert
receipts, upsert intents). Everything is idempotent: upserts by id, receipts
with ignore-on-conflict on (lease, kind, request id), intents by derived ids.
A row that cannot be read is reported and skipped; the mirror goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from sandboxes.logging import log_context
from sandboxes.models import (
    EnvironmentLease,
    ExecutionWorkspace,
    LeaseIntent,
    Receipt,
)
from sandboxes.models.choices import SaveState

from . import source, translate
from .cursor import CursorStore
from .translate import Malformed, Row, Save

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Table:
    name: str
    pk: str
    translate: Callable


# Dependency order: rows named by later tables usually exist by then, and a
# forward reference (an issue bound to a workspace not yet read) becomes a
# placeholder that the later table fills in within the same iteration.
TABLES = (
    Table("environments", "id", translate.environment),
    Table("issues", "id", translate.issue),
    Table("execution_workspaces", "id", translate.execution_workspace),
    Table("heartbeat_runs", "id", translate.heartbeat_run),
    Table("environment_leases", "id", translate.environment_lease),
    Table("work_folder_runs", "run_id", translate.work_folder_run),
    Table("issue_recovery_actions", "id", translate.recovery_action),
)


@dataclass
class Problem:
    table: str
    row_id: str
    reason: str
    action: str  # "skipped" or "quarantined"


@dataclass
class TableCounts:
    read: int = 0
    applied: int = 0
    skipped: int = 0
    quarantined: int = 0


@dataclass
class MirrorReport:
    source: str = ""
    tables: dict[str, TableCounts] = field(default_factory=dict)
    receipts: int = 0
    intents: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows_read(self) -> int:
        return sum(t.read for t in self.tables.values())

    @property
    def skipped(self) -> int:
        return sum(t.skipped for t in self.tables.values())

    @property
    def quarantined(self) -> int:
        return sum(t.quarantined for t in self.tables.values())

    def summary(self) -> str:
        parts = [f"{name} {c.read}" for name, c in self.tables.items() if c.read]
        return (
            f"mirrored {self.rows_read} rows from {self.source} in {self.seconds:.1f}s"
            f" ({', '.join(parts) or 'nothing changed'}); {self.receipts} new receipts,"
            f" {self.intents} intents; {self.skipped} rows skipped and"
            f" {self.quarantined} quarantined for unreadable data"
        )


# --- writing ----------------------------------------------------------------------


def _ensure_exist(refs: dict[type, set[UUID]]) -> None:
    """Create rows named but not (yet) mirrored as placeholders: 2 queries per model."""
    for model, ids in refs.items():
        if not ids:
            continue
        existing = set(model.objects.filter(pk__in=ids).values_list("pk", flat=True))
        missing = ids - existing
        if missing:
            model.objects.bulk_create(
                [model.placeholder_for(pk) for pk in missing],
                ignore_conflicts=True,
            )


def _newer_than_stored(model: type[models.Model], rows: list[Row]) -> list[Row]:
    """Drop rows whose source time is older than the row the console holds (DOMAIN
    §4.1, issue 10 item 10): ingest and the mirror both write these tables, and a
    late, older reading never overwrites newer state. The stored rows are locked,
    as ingest locks them, so the two writers are ordered against each other."""
    stored = dict(
        model.objects.select_for_update()
        .filter(pk__in=[row.pk for row in rows])
        .values_list("pk", "source_updated_at")
    )
    fresh = []
    for row in rows:
        seen = stored.get(row.pk)
        when = row.fields.get("source_updated_at")
        if seen is not None and when is not None and seen > when:
            continue
        fresh.append(row)
    return fresh


def _upsert(model: type[models.Model], rows: list[Row]) -> None:
    rows = _newer_than_stored(model, rows) if rows else rows
    if not rows:
        return
    fields = sorted({f for row in rows for f in row.fields})
    objs = [model(pk=row.pk, placeholder=bool(row.quarantined), **row.fields) for row in rows]
    update_fields = [model._meta.get_field(f).name for f in fields] + ["placeholder", "updated_at"]
    model.objects.bulk_create(
        objs,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["id"],
        update_fields=update_fields,
    )


def _write_rows(rows: list[Row], report: MirrorReport) -> None:
    refs: dict[type, set[UUID]] = {}
    for row in rows:
        for model, ids in row.refs.items():
            refs.setdefault(model, set()).update(ids)
    own = {row.pk for row in rows}
    if rows:
        refs[rows[0].model] = refs.get(rows[0].model, set()) - own
    _ensure_exist(refs)
    _upsert(rows[0].model, rows)

    receipts = [Receipt(actor="paperclip", **r) for row in rows for r in row.receipts]
    if receipts:
        before = Receipt.objects.filter(lease_id__in=[r.lease_id for r in receipts]).count()
        Receipt.objects.bulk_create(receipts, batch_size=500, ignore_conflicts=True)
        after = Receipt.objects.filter(lease_id__in=[r.lease_id for r in receipts]).count()
        report.receipts += after - before
    intents = [LeaseIntent(placeholder=False, **i) for row in rows for i in row.intents]
    if intents:
        LeaseIntent.objects.bulk_create(
            intents,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["id"],
            update_fields=["lease", "kind", "state", "request_id", "placeholder", "updated_at"],
        )
        report.intents += len(intents)


def _write_saves(saves: list[Save], counts: TableCounts, report: MirrorReport) -> None:
    """A committed save becomes the workspace's durable save; an older one never
    overwrites a newer one."""
    leases = dict(
        EnvironmentLease.objects.filter(pk__in={s.lease_id for s in saves}).values_list(
            "pk", "execution_workspace_id"
        )
    )
    workspace_ids = {ws for ws in leases.values() if ws is not None}
    workspaces = {ws.pk: ws for ws in ExecutionWorkspace.objects.filter(pk__in=workspace_ids)}
    changed: dict[UUID, ExecutionWorkspace] = {}
    now = timezone.now()
    for save in saves:
        ws = workspaces.get(leases.get(save.lease_id))
        if ws is None:
            _problem(
                report,
                counts,
                "work_folder_runs",
                save.run_id,
                f"lease {save.lease_id} is unknown or has no workspace",
            )
            continue
        if save.saved_at and ws.saved_at and save.saved_at < ws.saved_at:
            counts.applied += 1  # an older save: the newer one stands
            continue
        ws.save_state = save.state
        ws.updated_at = now
        if save.state == SaveState.SAVED:
            ws.saved_manifest = save.manifest or {}
            ws.saved_at = save.saved_at
            ws.final_checkpoint_at = save.final_checkpoint_at
        changed[ws.pk] = ws
        counts.applied += 1
    if changed:
        ExecutionWorkspace.objects.bulk_update(
            list(changed.values()),
            ["save_state", "saved_manifest", "saved_at", "final_checkpoint_at", "updated_at"],
        )


def _problem(report, counts, table, row_id, reason, action="skipped") -> None:
    report.problems.append(Problem(table, str(row_id), reason, action))
    if action == "skipped":
        counts.skipped += 1
    else:
        counts.quarantined += 1
    lease_id = str(row_id) if table == "environment_leases" else None
    with log_context(lease_id=lease_id):
        log.warning("mirror: %s row %s %s: %s", table, row_id, action, reason)


def apply_page(table: Table, page: list[dict], report: MirrorReport) -> None:
    counts = report.tables.setdefault(table.name, TableCounts())
    counts.read += len(page)
    translated = []
    for src in page:
        try:
            row = table.translate(src)
        except Malformed as exc:
            _problem(report, counts, table.name, src.get(table.pk), str(exc))
            continue
        if isinstance(row, Row) and isinstance(src.get("updated_at"), datetime):
            # The source time of what the mirror writes, as ingest records an
            # event's occurred_at: the newer of the two writers wins.
            row.fields["source_updated_at"] = src["updated_at"]
        translated.append(row)
    if not translated:
        return
    with transaction.atomic():
        if table.name == "work_folder_runs":
            _write_saves(translated, counts, report)
            return
        for row in translated:
            if row.quarantined:
                _problem(report, counts, table.name, row.pk, row.quarantined, "quarantined")
        _write_rows(translated, report)
        counts.applied += sum(1 for row in translated if not row.quarantined)


# --- one iteration ------------------------------------------------------------------


def mirror_once(
    dsn: str, *, full: bool = False, conn=None, batch_size: int | None = None
) -> MirrorReport:
    """Mirror every row changed since the stored cursors (everything with `full`)."""
    started = time.monotonic()
    batch_size = batch_size or settings.MIRROR_BATCH_SIZE
    overlap = timedelta(seconds=settings.MIRROR_OVERLAP_SECONDS)
    own_conn = conn is None
    conn = conn or source.connect(dsn)
    report = MirrorReport(source=source.describe(conn))
    try:
        store = CursorStore(report.source)
        cursors = {} if full else store.load()
        with conn.transaction():
            for table in TABLES:
                report.tables.setdefault(table.name, TableCounts())
                since = cursors.get(table.name)
                newest: datetime | None = None
                for page in source.changed_rows(
                    conn, table.name, table.pk, since - overlap if since else None, batch_size
                ):
                    apply_page(table, page, report)
                    newest = page[-1]["updated_at"]
                if newest is not None and (since is None or newest > since):
                    cursors[table.name] = newest
                    store.save(cursors)
    finally:
        if own_conn:
            conn.close()
    report.seconds = time.monotonic() - started
    return report


def follow(
    dsn: str,
    *,
    interval: float,
    max_iterations: int | None = None,
    full: bool = False,
    on_report: Callable[[MirrorReport], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Mirror again and again, `interval` seconds apart. An iteration that fails
    (the source is unreachable, say) is logged and retried on the next one."""
    iterations = 0
    while max_iterations is None or iterations < max_iterations:
        if iterations:
            sleep(interval)
        iterations += 1
        try:
            report = mirror_once(dsn, full=full and iterations == 1)
        except Exception:
            log.exception("mirror iteration %d failed; retrying in %ss", iterations, interval)
            continue
        if on_report is not None:
            on_report(report)
    return iterations
