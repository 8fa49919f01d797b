"""One mirror iteration: read changed Paperclip rows, upsert console rows in bulk.

Before reading, the mirror asks Paperclip's catalog which of its tables and
columns exist: an older installation lacks some (work_folder_runs,
heartbeat_runs.native_issue_id), and a missing table is skipped with a warning
in the summary, never an aborted iteration. Only the columns the mirror uses
are selected.

Tables are read in dependency order (`tables.py`) inside one read-only
snapshot, each through one server-side cursor. The step whose tables name one
another's rows only through placeholders (`STEPS`, issues to leases) is
shared: with MIRROR_PROCESSES = N, N-1 forked children read the same snapshot
(exported by this transaction, imported by theirs) and each process mirrors
its share of every table of the step (`source.Share`, a hash of the row's
key), so every core works, and on about as much as the others, where one
process waits on the console half the time (one process inside a
transaction, whose rows a second connection cannot see). The children send
back their counts, problems and how far they read; the parent alone moves
the cursors, once every share is in, and writes the cursor file. Each page
is translated (`translate.py`) and written in one console transaction with a
fixed number of queries (`write.py`); what was read, written, skipped and
quarantined goes to the iteration's `MirrorReport` (`report.py`). A row that
cannot be read is reported, counted by reason and skipped; the mirror goes
on.
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
from .cursor import CursorStore, Position, Reach, Window, reached
from .report import MirrorReport, TableCounts
from .source import Share
from .tables import STEPS, TABLES, Step, Table
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

    def step(self, conn, step: Step, report: MirrorReport) -> None:
        """Mirror one step's tables: a shared step's by every process at once,
        each its share of the rows, when more than one may run (`_concurrent`);
        else one table after another, here."""
        tables = [t for t in step.tables if self.columns[t.name]]
        processes = settings.MIRROR_PROCESSES if step.shared and self._concurrent() else 1
        snapshot_id = source.export_snapshot(conn) if processes > 1 and tables else None
        if snapshot_id is None:
            for table in tables:
                self.advance(table, [self.table(conn, table, report)])
                self.store.checkpoint(self.position)  # a long first iteration keeps what it did
            return
        connections.close_all()  # the children open their own
        started = time.monotonic()
        children = [
            Child.start(self, snapshot_id, tables, Share(index, processes))
            for index in range(1, processes)
        ]
        try:
            mine = {t.name: self.table(conn, t, report, Share(0, processes)) for t in tables}
        finally:
            here = time.monotonic() - started
            # Every child finishes its pages either way.
            outcomes = [child.wait() for child in children]
        log.debug(
            "mirror: %s shared by %d processes in %.1fs, this one's share in %.1fs",
            ", ".join(t.name for t in tables),
            processes,
            time.monotonic() - started,
            here,
        )
        for outcome in outcomes:
            outcome.check()
            report.merge(outcome.report)
        for table in tables:
            self.advance(table, [mine[table.name], *(o.reaches[table.name] for o in outcomes)])
        self.store.checkpoint(self.position)

    def _concurrent(self) -> bool:
        """More processes may read: they are asked for, the connection string
        is known, the console's writes commit (inside a transaction only this
        connection sees its rows), and this is no daemon (a django-q2 worker
        may not fork)."""
        return (
            settings.MIRROR_PROCESSES > 1
            and self.dsn is not None
            and not connection.in_atomic_block
            and not multiprocessing.current_process().daemon
        )

    def table(self, conn, table: Table, report: MirrorReport, share: Share | None = None) -> Reach:
        """Mirror one table's rows changed since its cursor (`share` of them),
        page by page; a row read again behind the cursor that has not changed
        since the last iteration wrote it is counted, not written again
        (`cursor.Window`). Returns how far it read (`advance` moves the
        cursor)."""
        since = self.position.cursors.get(table.name)
        window = Window(table.pk, self.overlap, self.position.seen.get(table.name, {}))
        newest: datetime | None = None
        columns = self.columns[table.name] or []
        for page in source.changed_rows(
            conn,
            table.name,
            table.pk,
            columns,
            since - self.overlap if since else None,
            self.batch_size,
            share,
        ):
            fresh, notes = window.split(page)
            counts = report.tables[table.name]
            counts.read += len(page) - len(fresh)
            counts.unchanged += len(page) - len(fresh)
            if fresh:
                apply_page(table, fresh, report)
            window.note(notes)
            newest = page[-1]["updated_at"]
        return window.reach(newest)

    def advance(self, table: Table, reaches: list[Reach]) -> None:
        """Move the table's cursor to the newest row its readers read, and keep
        the rows the next iteration reads again."""
        position = self.position
        since = position.cursors.get(table.name)
        newest, seen = reached(position.seen.get(table.name, {}), self.overlap, reaches)
        position.seen[table.name] = seen
        if newest is not None and (since is None or newest > since):
            position.cursors[table.name] = newest


@dataclass
class Outcome:
    """What a child process mirrored: its share's counts and problems and how
    far it read each table, or why it failed."""

    tables: tuple[str, ...]
    share: Share
    report: MirrorReport = field(default_factory=MirrorReport)
    reaches: dict[str, Reach] = field(default_factory=dict)
    failure: str = ""

    def check(self) -> None:
        if self.failure:
            raise MirrorProcessFailed(
                f"the mirror process for share {self.share.index + 1} of {self.share.count} of "
                f"{', '.join(self.tables)} failed: {self.failure}"
            )


class MirrorProcessFailed(RuntimeError):
    """A process sharing a step failed: its share of the step's tables was not
    (all) written, and none of their cursors moved."""


@dataclass
class Child:
    process: multiprocessing.process.BaseProcess
    receiver: Connection
    tables: tuple[str, ...]
    share: Share

    @classmethod
    def start(cls, reading: Reading, snapshot_id: str, tables: list[Table], share: Share) -> Child:
        # fork: the child starts from this process's state, Django set up and
        # the position as read; nothing is pickled on the way in.
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_child_main,
            args=(sender, reading, snapshot_id, tables, share),
            name=f"mirror share {share.index + 1}/{share.count}",
        )
        process.start()
        sender.close()
        return cls(process, receiver, tuple(t.name for t in tables), share)

    def wait(self) -> Outcome:
        try:
            outcome = self.receiver.recv()
        except EOFError:
            outcome = None
        self.process.join()
        self.receiver.close()
        if not isinstance(outcome, Outcome):
            return Outcome(
                self.tables, self.share, failure=f"it exited with code {self.process.exitcode}"
            )
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


def _child_main(
    sender: Connection, reading: Reading, snapshot_id: str, tables: list[Table], share: Share
) -> None:
    """A child's life: read its share of the tables in the parent's snapshot,
    write it, send back what it did and how far it read (the cursors are the
    parent's: one writer of the cursor file)."""
    names = tuple(t.name for t in tables)
    _own_connections()
    try:
        conn = source.connect(reading.dsn or "")
        try:
            report = MirrorReport(source=source.describe(conn))
            reaches = {}
            with conn.transaction():
                source.import_snapshot(conn, snapshot_id)
                for table in tables:
                    report.tables.setdefault(table.name, TableCounts())
                    reaches[table.name] = reading.table(conn, table, report, share)
        finally:
            conn.close()
        outcome = Outcome(names, share, report, reaches)
    except BaseException as exc:  # reported to the parent, which raises it
        log.exception("mirror process for share %d of %s failed", share.index + 1, ", ".join(names))
        outcome = Outcome(names, share, failure=f"{type(exc).__name__}: {exc}")
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
