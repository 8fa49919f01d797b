"""Mirror processes sharing a step (sandboxes/mirror/sync.py, MIRROR_PROCESSES =
N): forked children reading the parent's exported snapshot, each process
mirroring its share (`source.Share`) of issues, workspaces, runs and leases.
They must write what one process writes, report what it reports, keep the
cursors honest when a child fails, and fall back to one process where a
second cannot see the rows.

Transactional tests: the child has a console connection of its own, which
sees only committed rows (inside a test's transaction the mirror reads in one
process, as `test_inside_a_transaction_the_mirror_reads_in_one_process` shows).
"""

import multiprocessing
import os
import re

import psycopg
import pytest
from django.core.management import call_command
from psycopg import sql

from sandboxes import models as m
from sandboxes.mirror import source, sync, write
from sandboxes.mirror.source import Share
from sandboxes.mirror.sync import MirrorProcessFailed, mirror_once
from sandboxes.mirror.tables import STEPS, TABLES

from .paperclip import export_resume_marker, termination

# Every model the mirror writes, and the columns that differ run to run
# (stamps, a receipt's or audit row's random id), left out of the comparison.
WRITTEN = (*write.WRITE_ORDER, m.Receipt, m.LeaseIntent, m.PendingExport)
STAMPS = {"created_at", "updated_at"}


def console_state() -> dict:
    """Every mirrored row, as comparable values, by model."""
    state = {}
    for model in WRITTEN:
        names = [
            f.attname
            for f in model._meta.concrete_fields
            if f.name not in STAMPS and not (model is m.Receipt and f.primary_key)
        ]
        state[model.__name__] = sorted(
            (tuple(str(v) for v in row) for row in model.objects.values_list(*names)),
        )
    return state


def fleet(p) -> None:
    """A fleet with every shape the mirror handles: receipts, a pending stop
    (intent) and a settled one, an export in flight, a restore source, saves,
    recovery actions, quarantined and skipped rows, a lease that is no
    sandbox, and rows of each group naming rows of the other."""
    env = p.environment()
    tasks = [
        p.task(env, metadata=lambda row: {"remoteExecutionTermination": termination(row)})
        for _ in range(7)
    ]
    for issue, _, run, lease in tasks[:3]:
        p.recovery_action(issue, [lease], status="resolved")
        p.save(run, lease, {"a.txt": "a"})
    _, _, _, stopping = p.task(env, status="active", released_at=None)
    p.prepare_stop(stopping)
    _, _, _, settled = p.task(env, status="active", released_at=None)
    p.prepare_stop(settled)
    p.settle_stop(settled)
    _, _, _, restoring = p.task(env, status="active", released_at=None)
    p.preserve_restore_source(restoring)
    p.task(env, metadata=lambda row: {"nativeWorkspaceExportResume": export_resume_marker(row, "")})
    issue, _, _, broken = p.task(
        env,
        metadata=lambda row: {"remoteExecutionTermination": termination(row, providerLeaseId="x")},
    )
    p.retry_to_new_workspace(issue)
    p.issue(status="paused")  # a status this console does not know: skipped
    local = p.environment(driver="local", provider=None)
    p.task(local, provider_lease_id=None)  # no sandbox


def reset_console() -> None:
    call_command("flush", verbosity=0, interactive=False)  # past the append-only triggers


def mirror_with(settings, processes: int, paperclip, **kwargs):
    settings.MIRROR_PROCESSES = processes
    return mirror_once(paperclip.dsn, full=True, **kwargs)


def in_a_child() -> bool:
    return multiprocessing.parent_process() is not None


def shares(p, table: str, count: int = 2) -> dict[int, set]:
    """The ids of `table` in each share, as the mirror's query splits them."""
    query = sql.SQL("SELECT id, {} AS share FROM {}").format(Share.of("id"), sql.Identifier(table))
    rows = p.conn.execute(query, [count]).fetchall()
    out: dict[int, set] = {i: set() for i in range(count)}
    for pk, share in rows:
        out[share].add(pk)
    return out


# The tables of the shared step: a task writes a row in each.
SHARED_TABLES = ("issues", "execution_workspaces", "heartbeat_runs", "environment_leases")


def tasks_in_both_shares(p, env) -> list:
    """Tasks until both shares of two hold a row of every table of the shared
    step (ids are random: a share of one table may be empty when the other
    tables' are not)."""
    tasks = [p.task(env) for _ in range(4)]
    while not all(all(shares(p, table).values()) for table in SHARED_TABLES):
        tasks.append(p.task(env))
    return tasks


def problems(report) -> list:
    """The problems named, in no process's order."""
    return sorted((p.table, p.row_id, p.reason, p.action) for p in report.problems)


def summary(report) -> str:
    """The summary line without its duration."""
    return re.sub(r" in [0-9.]+s ", " ", report.summary())


@pytest.mark.django_db(transaction=True)
def test_two_processes_write_and_report_what_one_does(paperclip, settings, monkeypatch):
    fleet(paperclip)
    started = []
    start = sync.Child.start
    monkeypatch.setattr(sync.Child, "start", lambda *a: started.append(a) or start(*a))
    reset_console()
    # Pages of 3 rows: both processes write many pages, side by side.
    one = mirror_with(settings, 1, paperclip, batch_size=3)
    assert not started
    alone = console_state()
    for processes, children in ((2, 1), (3, 3)):  # `started` counts every child so far
        reset_console()
        shared = mirror_with(settings, processes, paperclip, batch_size=3)
        assert len(started) == children, f"{processes} processes did not share the step"
        assert console_state() == alone
        assert summary(shared) == summary(one)
        assert problems(shared) == problems(one)
        leases = shared.tables["environment_leases"].applied
        assert leases == one.tables["environment_leases"].applied > 0
        assert shared.quarantined == 1 and shared.skipped == 1 and shared.not_sandbox == 1


@pytest.mark.django_db(transaction=True)
def test_each_process_reads_its_share_of_every_table_of_the_step(paperclip, settings, monkeypatch):
    """The shares split each table's rows between the processes, none read
    twice and none left out: what each process read, by table."""
    p = paperclip
    tasks_in_both_shares(p, p.environment())
    read: list[tuple] = []
    changed_rows = source.changed_rows

    def noting(conn, table, pk, columns, since, batch_size, share=None):
        for page in changed_rows(conn, table, pk, columns, since, batch_size, share):
            read.extend((table, share, row[pk]) for row in page)
            yield page

    monkeypatch.setattr(source, "changed_rows", noting)
    settings.MIRROR_PROCESSES = 1
    one = mirror_once(p.dsn, full=True)
    assert all(share is None for _, share, _ in read)
    assert one.tables["environment_leases"].applied == len(
        shares(p, "environment_leases")[0]
    ) + len(shares(p, "environment_leases")[1])
    # Forked children note in their own memory: their share is what the parent's is not.
    read.clear()
    settings.MIRROR_PROCESSES = 2
    two = mirror_once(p.dsn, full=True)
    for table in SHARED_TABLES:
        mine = {pk for name, share, pk in read if name == table}
        assert {share for name, share, _ in read if name == table} == {Share(0, 2)}
        assert mine == shares(p, table)[0], table
        assert two.tables[table].read == sum(map(len, shares(p, table).values())), table
    # Outside the shared step, the parent alone reads every row.
    assert {share for name, share, _ in read if name == "environments"} == {None}


@pytest.mark.django_db(transaction=True)
def test_the_next_iteration_starts_where_both_processes_stopped(paperclip, settings):
    p = paperclip
    env = p.environment()
    _, _, _, lease = p.task(env)
    settings.MIRROR_PROCESSES = 2
    settings.MIRROR_OVERLAP_SECONDS = 0
    mirror_once(p.dsn)
    p.update("environment_leases", lease["id"], status="expired")
    changed = mirror_once(p.dsn)
    # The child's cursor came back to the parent: only the changed lease is read.
    assert changed.tables["environment_leases"].read == 1, changed.summary()
    assert m.EnvironmentLease.objects.get(pk=lease["id"]).status == "expired"


@pytest.mark.django_db(transaction=True)
def test_a_failed_child_fails_the_iteration_and_keeps_its_cursors(paperclip, settings, monkeypatch):
    p = paperclip
    env = p.environment()
    tasks = tasks_in_both_shares(p, env)
    apply_page = sync.apply_page

    def failing(table, page, report):
        if table.name == "environment_leases" and in_a_child():
            raise psycopg.OperationalError("the console went away")
        return apply_page(table, page, report)

    monkeypatch.setattr(sync, "apply_page", failing)  # in the child too: it is forked
    settings.MIRROR_PROCESSES = 2
    with pytest.raises(MirrorProcessFailed, match="environment_leases failed: OperationalError"):
        mirror_once(p.dsn)
    # The parent's share was written, and the child's issues before its leases.
    assert m.Issue.objects.filter(placeholder=False).count() == len(tasks)
    written = set(m.EnvironmentLease.objects.filter(placeholder=False).values_list("pk", flat=True))
    assert written == shares(p, "environment_leases")[0]
    monkeypatch.setattr(sync, "apply_page", apply_page)
    report = mirror_once(p.dsn)
    # Nothing was skipped for good: no cursor of the step had moved, the
    # parent's share's included.
    assert report.tables["environment_leases"].applied == len(tasks), report.summary()
    assert report.tables["issues"].read == len(tasks), report.summary()
    assert {lease["id"] for *_, lease in tasks} == set(
        m.EnvironmentLease.objects.filter(placeholder=False).values_list("pk", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_the_two_processes_take_their_locks_in_one_order(paperclip, settings):
    """An issue page creates its workspace's placeholder while the lease page
    beside it creates the issue's and the workspace's: taken in different
    orders, each waits on the other and PostgreSQL kills one (a second lost,
    and the page written again). In WRITE_ORDER, never: pages of one row,
    as many as there are tasks, side by side."""
    p = paperclip
    env = p.environment()
    settings.MIRROR_PROCESSES = 2
    deadlocks = 0
    for _ in range(3):
        for _ in range(4):
            p.task(env)
        report = mirror_once(p.dsn, full=True, batch_size=1)
        assert report.tables["environment_leases"].applied > 0, report.summary()
        deadlocks += report.deadlocks
    assert deadlocks == 0


@pytest.mark.django_db(transaction=True)
def test_a_child_that_dies_without_a_word_fails_the_iteration(paperclip, settings, monkeypatch):
    """Killed (the OOM killer, say) before it could report: the pipe closes
    empty, and the parent names the exit code."""
    p = paperclip
    tasks = tasks_in_both_shares(p, p.environment())
    apply_page = sync.apply_page

    def dying(table, page, report):
        if table.name == "environment_leases" and in_a_child():
            os._exit(9)
        return apply_page(table, page, report)

    monkeypatch.setattr(sync, "apply_page", dying)
    settings.MIRROR_PROCESSES = 2
    with pytest.raises(MirrorProcessFailed, match="leases failed: it exited with code 9"):
        mirror_once(p.dsn)
    monkeypatch.setattr(sync, "apply_page", apply_page)
    assert mirror_once(p.dsn).tables["environment_leases"].applied == len(tasks)


@pytest.mark.django_db(transaction=True)
def test_the_child_never_uses_a_connection_it_inherited(paperclip, settings, monkeypatch):
    """A fork copies the parent's Django connections, open sockets included
    (after a browser test, the child's thread saw one the parent had not
    closed: CI, 2026-12-04). Used by both, one session serves two processes'
    statements at once; closed by the child, it ends the parent's."""
    p = paperclip
    for _ in range(3):
        p.task(p.environment())
    monkeypatch.setattr(sync.connections, "close_all", lambda: None)  # the parent's stays open
    settings.MIRROR_PROCESSES = 2
    m.Company.objects.count()  # the parent's connection is open at the fork
    report = mirror_once(p.dsn)
    assert report.tables["environment_leases"].applied == 3, report.summary()
    assert (
        m.EnvironmentLease.objects.filter(placeholder=False).count() == 3
    )  # the parent's still works


@pytest.mark.django_db
def test_inside_a_transaction_the_mirror_reads_in_one_process(paperclip, settings, monkeypatch):
    """A forked child's connection would not see this transaction's rows."""
    p = paperclip
    p.task(p.environment())
    monkeypatch.setattr(sync.Child, "start", pytest.fail)
    settings.MIRROR_PROCESSES = 2
    report = mirror_once(p.dsn)
    assert report.tables["environment_leases"].applied == 1


@pytest.mark.django_db(transaction=True)
def test_without_an_exported_snapshot_the_mirror_reads_in_one_process(
    paperclip, settings, monkeypatch
):
    """A standby exports no snapshot: one process reads every table."""
    p = paperclip
    p.task(p.environment())
    monkeypatch.setattr(source, "export_snapshot", lambda conn: None)
    monkeypatch.setattr(sync.Child, "start", pytest.fail)
    settings.MIRROR_PROCESSES = 2
    assert mirror_once(p.dsn).tables["environment_leases"].applied == 1


def test_the_steps_hold_every_table_once_in_dependency_order():
    flat = [t for step in STEPS for t in step.tables]
    assert flat == list(TABLES)
    # Shared: the tables whose rows name one another only through placeholders.
    assert [[t.name for t in step.tables] for step in STEPS if step.shared] == [
        ["issues", "execution_workspaces", "heartbeat_runs", "environment_leases"]
    ]


def test_an_exported_snapshot_is_what_the_importer_reads(paperclip):
    """The child reads the parent's snapshot: a row committed after the export
    is not in it."""
    p = paperclip
    env = p.environment()
    parent, child = source.connect(p.dsn), source.connect(p.dsn)
    try:
        with parent.transaction():
            source.snapshot(parent)
            exported = source.export_snapshot(parent)
            assert exported
            p.task(env)  # committed after the export
            with child.transaction():
                source.import_snapshot(child, exported)
                leases = child.execute("SELECT count(*) AS n FROM environment_leases").fetchone()
            assert leases["n"] == 0
    finally:
        parent.close()
        child.close()
