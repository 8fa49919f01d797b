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
from .cursor import CursorStore
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
        cursors = {} if full else store.load()
        with conn.transaction():
            schema = source.columns_by_table(conn, [t.name for t in TABLES])
            for table in TABLES:
                report.tables.setdefault(table.name, TableCounts())
                columns = readable_columns(table, schema.get(table.name), report)
                if columns is None:
                    continue
                since = cursors.get(table.name)
                newest: datetime | None = None
                for page in source.changed_rows(
                    conn,
                    table.name,
                    table.pk,
                    columns,
                    since - overlap if since else None,
                    batch_size,
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
