"""What an iteration costs when little or nothing changed (docs/architecture.md,
a mirror iteration when little changed): Paperclip's snapshot unchanged since the
last complete iteration, nothing is read; rows read again behind the cursor
that have not changed since they were written are not written again. Neither
may ever hide a change: a row changed without moving its updated_at, a late
commit behind the cursor, an iteration that failed half-way.

The snapshot is PostgreSQL's own (pg_current_snapshot, PostgreSQL 13 and
newer; Paperclip's embedded server is 18: packages/db/package.json,
embedded-postgres ^18.1.0-beta.16, paperclipai/paperclip at 067c0c73):
equal snapshots see equal data, whatever the table, since every write takes
a transaction id and moves xmax or the in-progress list when it commits or
aborts. Transaction ids are the
server's, not one database's: a write in any database of the server (the
console's own here, and the other test workers') moves it too. So the tests of
what the mirror does with an unchanged snapshot hold it still (`frozen`), and
the snapshot itself is tested on its own.
"""

import json

import psycopg
import pytest

from sandboxes import models as m
from sandboxes.mirror import cursor, source, sync
from sandboxes.mirror.sync import mirror_once

pytestmark = pytest.mark.django_db


@pytest.fixture
def pages(monkeypatch):
    """The pages the mirror writes, as (table, row ids)."""
    written: list[tuple[str, list]] = []
    apply_page = sync.apply_page

    def recording(table, page, report):
        written.append((table.name, [row[table.pk] for row in page]))
        return apply_page(table, page, report)

    monkeypatch.setattr(sync, "apply_page", recording)
    return written


@pytest.fixture
def frozen(monkeypatch):
    """Nothing commits anywhere on the server from here on, as far as the
    mirror can tell: its snapshot is the same at every iteration."""
    monkeypatch.setattr(sync.source, "snapshot", lambda conn: "16384/frozen/1000:1000:")


def write_elsewhere(paperclip) -> None:
    """A write Paperclip makes in a table the mirror does not read (its
    activity log, say): another transaction committed, nothing mirrored changed."""
    paperclip.conn.execute("CREATE TEMP TABLE IF NOT EXISTS activity (n int)")
    paperclip.conn.execute("INSERT INTO activity VALUES (1)")


def fail_at_the_leases(monkeypatch) -> None:
    """The console goes away when the mirror writes its first page of leases."""
    apply_page = sync.apply_page

    def failing(table, page, report):
        if table.name == "environment_leases":
            raise psycopg.OperationalError("the console went away")
        return apply_page(table, page, report)

    monkeypatch.setattr(sync, "apply_page", failing)


def fleet(paperclip, n=3):
    env = paperclip.environment()
    return [paperclip.task(env) for _ in range(n)]


def test_an_iteration_with_nothing_changed_in_paperclip_reads_nothing(
    paperclip, settings, pages, frozen
):
    settings.MIRROR_OVERLAP_SECONDS = 30
    fleet(paperclip)
    first = mirror_once(paperclip.dsn)
    assert first.tables["environment_leases"].read == 3 and not first.source_unchanged
    pages.clear()

    idle = mirror_once(paperclip.dsn)

    assert idle.source_unchanged
    assert idle.rows_read == 0 and pages == []
    # Every table is still in the report (zero), and the summary says why.
    assert idle.tables["environment_leases"].read == 0
    assert "nothing changed since the last iteration" in idle.summary()
    # --full reads everything, whatever the stored snapshot.
    assert mirror_once(paperclip.dsn, full=True).tables["environment_leases"].read == 3


def test_rows_read_again_behind_the_cursor_are_not_written_again(paperclip, settings, pages):
    settings.MIRROR_OVERLAP_SECONDS = 30  # every row is within the overlap
    issue, _, _, lease = fleet(paperclip)[0]
    mirror_once(paperclip.dsn)
    written_at = m.EnvironmentLease.objects.get(pk=lease["id"]).updated_at
    pages.clear()
    write_elsewhere(paperclip)

    again = mirror_once(paperclip.dsn)

    assert not again.source_unchanged  # the snapshot moved: every table is read
    assert again.tables["environment_leases"].read == 3
    assert again.tables["environment_leases"].unchanged == 3
    assert again.rows_mirrored == 0 and pages == []
    assert m.EnvironmentLease.objects.get(pk=lease["id"]).updated_at == written_at
    assert f"{again.unchanged} read again unchanged" in again.summary()

    # A change to one of them is written, and only it.
    paperclip.update("issues", issue["id"], title="Renamed")
    changed = mirror_once(paperclip.dsn)
    assert pages == [("issues", [issue["id"]])]
    assert changed.tables["issues"].unchanged == 2
    assert m.Issue.objects.get(pk=issue["id"]).title == "Renamed"


def test_a_row_changed_without_moving_its_updated_at_is_written(paperclip, settings):
    """The digest is of the row's values, not of (id, updated_at): a writer that
    does not touch updated_at (or two writes in the same microsecond) is seen."""
    settings.MIRROR_OVERLAP_SECONDS = 0  # only the rows at the cursor are read again
    (issue, _, _, _) = fleet(paperclip, n=1)[0]
    mirror_once(paperclip.dsn)
    paperclip.conn.execute("UPDATE issues SET title = 'Same time' WHERE id = %s", [issue["id"]])

    report = mirror_once(paperclip.dsn)

    assert report.tables["issues"].read == 1 and report.tables["issues"].unchanged == 0
    assert m.Issue.objects.get(pk=issue["id"]).title == "Same time"


def test_a_late_commit_behind_the_cursor_is_mirrored(paperclip, settings):
    """A transaction that stamped updated_at before the last iteration read and
    committed after it: within the overlap, read again and written."""
    settings.MIRROR_OVERLAP_SECONDS = 30
    issues = [task[0] for task in fleet(paperclip)]
    for issue, seconds_ago in zip(issues, (20, 2, 1), strict=True):
        paperclip.conn.execute(
            "UPDATE issues SET updated_at = now() - make_interval(secs => %s) WHERE id = %s",
            [seconds_ago, issue["id"]],
        )
    mirror_once(paperclip.dsn)  # the cursor: 1 s ago
    # Stamped 10 s ago (after the row's last version), committed only now.
    paperclip.conn.execute(
        "UPDATE issues SET title = 'Committed late', updated_at = now() - interval '10 seconds'"
        " WHERE id = %s",
        [issues[0]["id"]],
    )

    mirror_once(paperclip.dsn)

    assert m.Issue.objects.get(pk=issues[0]["id"]).title == "Committed late"


def test_an_iteration_that_failed_half_way_is_not_taken_for_a_complete_one(
    paperclip, settings, monkeypatch, frozen
):
    """Its tables before the failure are written, its snapshot is not saved:
    with Paperclip unchanged since, the next iteration still reads what it missed."""
    settings.MIRROR_OVERLAP_SECONDS = 30
    (issue, _, _, lease) = fleet(paperclip, n=1)[0]
    with monkeypatch.context() as failing:
        fail_at_the_leases(failing)
        with pytest.raises(psycopg.OperationalError):
            mirror_once(paperclip.dsn)
    assert m.Issue.objects.get(pk=issue["id"]).placeholder is False
    assert not m.EnvironmentLease.objects.filter(pk=lease["id"]).exists()

    report = mirror_once(paperclip.dsn)

    assert not report.source_unchanged
    assert report.tables["environment_leases"].applied == 1
    assert m.EnvironmentLease.objects.filter(pk=lease["id"]).exists()


def test_past_the_window_the_oldest_rows_are_written_again(paperclip, settings, monkeypatch):
    """At most WINDOW_ROWS rows per table are noted; the rest are written again,
    as before there was a window."""
    settings.MIRROR_OVERLAP_SECONDS = 30
    monkeypatch.setattr(cursor, "WINDOW_ROWS", 2)
    fleet(paperclip, n=4)
    mirror_once(paperclip.dsn)
    write_elsewhere(paperclip)

    again = mirror_once(paperclip.dsn)

    counts = again.tables["environment_leases"]
    assert (counts.read, counts.unchanged, counts.applied) == (4, 2, 2)


def test_the_snapshot_names_the_database_and_moves_with_any_commit(paperclip):
    def snapshot(exported=None):
        with source.connect(paperclip.dsn) as conn, conn.transaction():
            if exported:
                conn.execute(f"SET TRANSACTION SNAPSHOT '{exported}'")
            return source.snapshot(conn)

    # Two transactions with one snapshot (one exports it, the other takes it):
    # one string.
    with psycopg.connect(paperclip.dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        exported = holder.execute("SELECT pg_export_snapshot()").fetchone()[0]
        held = holder.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
        before = snapshot(exported)
        assert before == snapshot(exported) and before.endswith(f"/{held}")
    write_elsewhere(paperclip)
    after = snapshot()
    assert after is not None and after != before
    with psycopg.connect(paperclip.dsn) as conn:
        oid = conn.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]
    assert after.startswith(f"{oid}/")


def test_a_cursor_file_of_the_first_format_is_read(paperclip, settings, cursor_file):
    """The file once held the cursors alone ({table: time}): they still count,
    with no snapshot and no rows noted."""
    settings.MIRROR_OVERLAP_SECONDS = 0
    fleet(paperclip, n=2)
    mirror_once(paperclip.dsn)
    stored = json.loads(cursor_file.read_text())
    ((key, entry),) = stored.items()
    cursor_file.write_text(json.dumps({key: entry["cursors"]}))

    report = mirror_once(paperclip.dsn)

    assert not report.source_unchanged
    assert report.tables["environment_leases"].read <= 1  # at the cursor only
    assert report.unchanged == 0


def test_a_short_iteration_writes_the_position_once_a_long_one_as_it_goes(
    paperclip, settings, monkeypatch, cursor_file
):
    """The file holds up to WINDOW_ROWS digests a table: written once an
    iteration, and every CHECKPOINT_SECONDS by a long one, which then keeps
    the tables it finished if it fails."""
    settings.MIRROR_OVERLAP_SECONDS = 30
    (issue, _, _, lease) = fleet(paperclip, n=1)[0]
    writes = []
    write_all = cursor.CursorStore._write_all

    def counted(store, everything):
        writes.append(set(everything[store.key]["cursors"]))
        return write_all(store, everything)

    monkeypatch.setattr(cursor.CursorStore, "_write_all", counted)
    mirror_once(paperclip.dsn)
    assert len(writes) == 1 and "environment_leases" in writes[0]

    # A long iteration (every table past the checkpoint) that fails at the leases.
    cursor_file.unlink()
    writes.clear()
    monkeypatch.setattr(cursor, "CHECKPOINT_SECONDS", 0.0)
    fail_at_the_leases(monkeypatch)
    with pytest.raises(psycopg.OperationalError):
        mirror_once(paperclip.dsn)
    assert writes and "issues" in writes[-1] and "environment_leases" not in writes[-1]
    saved = json.loads(cursor_file.read_text())
    (entry,) = saved.values()
    assert entry["snapshot"] is None and "issues" in entry["cursors"]
