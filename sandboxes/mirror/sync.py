"""One mirror iteration: read changed Paperclip rows, upsert console rows in bulk.

Before reading, the mirror asks Paperclip's catalog which of its tables and
columns exist: an older installation lacks some (work_folder_runs,
heartbeat_runs.native_issue_id), and a missing table is skipped with a warning
in the summary, never an aborted iteration. Only the columns the mirror uses
are selected.

Tables are read in dependency order (`tables.py`) inside one read-only
snapshot, each through one server-side cursor. Where a step of that order has
two groups of tables that name each other's rows only through placeholders
(`STEPS`), a second process mirrors the second group, reading the same snapshot
(exported by this transaction, imported by the child's), while this one
mirrors the first: both cores work, where one process waits on the console
half the time (MIRROR_PROCESSES; one process inside a transaction, whose rows
a second connection cannot see). The child sends back its counts, problems and
cursors; the parent alone writes the cursor file. Each page is translated
(`translate.py`) and written in one console transaction with a fixed number of
queries (`write.py`); what was read, written, skipped and quarantined goes to
the iteration's `MirrorReport` (`report.py`). A row that cannot be read is
reported, counted by reason and skipped; the mirror goes on.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from multiprocessing.connection import Connection

from django.conf import settings
from django.db import connection, connections

from . import source
from .cursor import CursorStore, Position, Window
from .report import MirrorReport, TableCounts
from .tables import STEPS, TABLES, Table
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
        reading = Reading(dsn if own_conn else None, position, store, overlap, batch_size)
        with conn.transaction():
            # First: the snapshot every read below sees.
            snapshot = source.snapshot(conn)
            report.source_unchanged = snapshot is not None and snapshot == position.snapshot
            position.snapshot = None  # until this iteration completes
            schema = source.columns_by_table(conn, [t.name for t in TABLES])
            for table in TABLES:
                report.tables.setdefault(table.name, TableCounts())
                reading.columns[table.name] = readable_columns(
                    table, schema.get(table.name), report
                )
            if not report.source_unchanged:
                for step in STEPS:
                    reading.step(conn, step, report)
        if not report.source_unchanged:
            position.snapshot = snapshot
            store.save_position(position)
    finally:
        if own_conn:
            conn.close()
    report.seconds = time.monotonic() - started
    return report


@dataclass
class Reading:
    """One iteration's reading: where each table starts, what is read of it,
    and where the position is kept."""

    dsn: str | None  # None: the caller's connection alone reads (no second process)
    position: Position
    store: CursorStore
    overlap: timedelta
    batch_size: int
    columns: dict[str, list[str] | None] = field(default_factory=dict)

    def step(self, conn, step: tuple[tuple[Table, ...], ...], report: MirrorReport) -> None:
        """Mirror one step's groups: the second in a process of its own when
        that may run (`_concurrent`), else one table after another."""
        groups = [g for g in ([t for t in group if self.columns[t.name]] for group in step) if g]
        concurrent = len(groups) > 1 and self._concurrent()
        snapshot_id = source.export_snapshot(conn) if concurrent else None
        if snapshot_id is None:
            for table in (t for group in groups for t in group):
                self.table(conn, table, report, self.store.checkpoint)
            return
        first, second = groups
        connections.close_all()  # the child opens its own
        started = time.monotonic()
        child = Child.start(self, snapshot_id, second)
        try:
            for table in first:
                self.table(conn, table, report, self.store.checkpoint)
        finally:
            mine = time.monotonic() - started
            outcome = child.wait()  # the child finishes its pages either way
        log.debug(
            "mirror: %s in %.1fs here, %s in %.1fs in a second process",
            ", ".join(t.name for t in first),
            mine,
            ", ".join(t.name for t in second),
            time.monotonic() - started,
        )
        outcome.apply(report, self.position)
        self.store.checkpoint(self.position)

    def _concurrent(self) -> bool:
        """A second process may read: it is asked for, the connection string is
        known, the console's writes commit (inside a transaction only this
        connection sees its rows), and this is no daemon (a django-q2 worker
        may not fork)."""
        return (
            settings.MIRROR_PROCESSES > 1
            and self.dsn is not None
            and not connection.in_atomic_block
            and not multiprocessing.current_process().daemon
        )

    def table(self, conn, table: Table, report: MirrorReport, checkpoint) -> None:
        """Mirror one table's rows changed since its cursor, page by page; a row
        read again behind the cursor that has not changed since the last
        iteration wrote it is counted, not written again (`cursor.Window`)."""
        position = self.position
        since = position.cursors.get(table.name)
        window = Window(table.pk, self.overlap, position.seen.get(table.name, {}))
        newest: datetime | None = None
        columns = self.columns[table.name] or []
        for page in source.changed_rows(
            conn,
            table.name,
            table.pk,
            columns,
            since - self.overlap if since else None,
            self.batch_size,
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
            checkpoint(position)  # a long first iteration keeps what it did


@dataclass
class Outcome:
    """What a child process mirrored: its tables' counts and problems and where
    each now starts, or why it failed."""

    tables: tuple[str, ...]
    report: MirrorReport | None = None
    cursors: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)
    failure: str = ""

    def apply(self, report: MirrorReport, position: Position) -> None:
        if self.report is None:
            raise MirrorProcessFailed(
                f"the mirror process for {', '.join(self.tables)} failed: {self.failure}"
            )
        report.merge(self.report)
        position.cursors.update(self.cursors)
        position.seen.update(self.seen)


class MirrorProcessFailed(RuntimeError):
    """The second process of a step failed; its tables were not (all) written
    and their cursors stay where they were."""


@dataclass
class Child:
    process: multiprocessing.process.BaseProcess
    receiver: Connection
    tables: tuple[str, ...]

    @classmethod
    def start(cls, reading: Reading, snapshot_id: str, tables: list[Table]) -> Child:
        # fork: the child starts from this process's state, Django set up and
        # the position as read; nothing is pickled on the way in.
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_child_main,
            args=(sender, reading, snapshot_id, tables),
            name=f"mirror {'+'.join(t.name for t in tables)}",
        )
        process.start()
        sender.close()
        return cls(process, receiver, tuple(t.name for t in tables))

    def wait(self) -> Outcome:
        try:
            outcome = self.receiver.recv()
        except EOFError:
            outcome = None
        self.process.join()
        self.receiver.close()
        if not isinstance(outcome, Outcome):
            return Outcome(self.tables, failure=f"it exited with code {self.process.exitcode}")
        return outcome


# The Django connections a child inherited from its parent, kept and never
# used: closing one, or letting it be collected, would end the parent's
# session on the socket both hold. The child exits without finalizing them.
_INHERITED: list = []


def _own_connections() -> None:
    """Give this (forked) process console connections of its own. The parent
    closes its connections before forking, but what the child's thread sees as
    its connections may be another context's (after Playwright's greenlets in
    a test run, say), open on the parent's sockets."""
    for alias in connections:
        _INHERITED.append(connections[alias])
        connections[alias] = connections.create_connection(alias)


def _child_main(sender: Connection, reading: Reading, snapshot_id: str, tables) -> None:
    """A child's life: read its tables in the parent's snapshot, write them,
    send back what it did (checkpoints are the parent's: one writer of the
    cursor file)."""
    names = tuple(t.name for t in tables)
    _own_connections()
    try:
        conn = source.connect(reading.dsn or "")
        try:
            report = MirrorReport(source=source.describe(conn))
            with conn.transaction():
                source.import_snapshot(conn, snapshot_id)
                for table in tables:
                    report.tables.setdefault(table.name, TableCounts())
                    reading.table(conn, table, report, lambda position: None)
        finally:
            conn.close()
        position = reading.position
        outcome = Outcome(
            names,
            report,
            {n: position.cursors[n] for n in names if n in position.cursors},
            {n: position.seen[n] for n in names if n in position.seen},
        )
    except BaseException as exc:  # reported to the parent, which raises it
        log.exception("mirror process for %s failed", ", ".join(names))
        outcome = Outcome(names, failure=f"{type(exc).__name__}: {exc}")
    finally:
        connections.close_all()
    sender.send(outcome)
    sender.close()


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
