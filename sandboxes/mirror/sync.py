"""One mirror iteration: read changed Paperclip rows, upsert console rows in bulk.

Before reading, the mirror asks Paperclip's catalog which of its tables and
columns exist: an older installation lacks some (work_folder_runs,
heartbeat_runs.native_issue_id), and a missing table is skipped with a warning
in the summary, never an aborted iteration. Only the columns the mirror uses
are selected.

Tables are read in dependency order (`tables.py`) inside one read-only
snapshot, each through one server-side cursor; each page is translated
(`translate.py`) and written in one console transaction with a fixed number of
queries (`write.py`); what was read, written, skipped and quarantined goes to
the iteration's `MirrorReport` (`report.py`). A row that cannot be read is
reported, counted by reason and skipped; the mirror goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings

from . import source
from .cursor import CursorStore, Position, Window
from .report import MirrorReport, TableCounts
from .tables import TABLES, Table
from .write import apply_page

log = logging.getLogger(__name__)

# mirror_paperclip and the benchmarks import these from here.
__all__ = ["TABLES", "MirrorReport", "follow", "mirror_once"]


def readable_columns(table: Table, present: set[str] | None, report: MirrorReport):
    """The columns to select from `table`, or None when it cannot be read (it
    does not exist, or lacks a column the mirror needs): a warning in the
    summary, never an aborted iteration."""
    if present is None:
        report.tables_missing.append(table.name)
        log.warning("mirror: Paperclip has no table %s; skipped", table.name)
        return None
    lacking = [c for c in table.required if c not in present]
    if lacking:
        report.tables_missing.append(f"{table.name} (no {', '.join(lacking)})")
        log.warning("mirror: %s lacks %s; skipped", table.name, ", ".join(lacking))
        return None
    for column in table.optional:
        if column not in present:
            report.columns_missing.append(f"{table.name}.{column}")
    return [c for c in (*table.required, *table.optional) if c in present]


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
        position = Position() if full else store.load_position()
        with conn.transaction():
            # First: the snapshot every read below sees.
            snapshot = source.snapshot(conn)
            report.source_unchanged = snapshot is not None and snapshot == position.snapshot
            position.snapshot = None  # until this iteration completes
            schema = source.columns_by_table(conn, [t.name for t in TABLES])
            for table in TABLES:
                report.tables.setdefault(table.name, TableCounts())
                columns = readable_columns(table, schema.get(table.name), report)
                if columns is not None and not report.source_unchanged:
                    _mirror_table(
                        conn, table, columns, position, store, report, overlap, batch_size
                    )
        if not report.source_unchanged:
            position.snapshot = snapshot
            store.save_position(position)
    finally:
        if own_conn:
            conn.close()
    report.seconds = time.monotonic() - started
    return report


def _mirror_table(conn, table, columns, position, store, report, overlap, batch_size) -> None:
    """Mirror one table's rows changed since its cursor, page by page; a row
    read again behind the cursor that has not changed since the last iteration
    wrote it is counted, not written again (`cursor.Window`)."""
    since = position.cursors.get(table.name)
    window = Window(table.pk, overlap, position.seen.get(table.name, {}))
    newest: datetime | None = None
    for page in source.changed_rows(
        conn, table.name, table.pk, columns, since - overlap if since else None, batch_size
    ):
        fresh, notes = window.split(page)
        counts = report.tables[table.name]
        counts.read += len(page) - len(fresh)
        counts.unchanged += len(page) - len(fresh)
        if fresh:
            apply_page(table, fresh, report)
        window.note(notes)
        newest = page[-1]["updated_at"]
    position.seen[table.name] = window.seen(newest)
    if newest is not None and (since is None or newest > since):
        position.cursors[table.name] = newest
        store.checkpoint(position)  # a long first iteration keeps what it did


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
