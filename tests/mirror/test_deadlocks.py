"""A page PostgreSQL picks as a deadlock's victim is written again, its counts
kept once (sandboxes/mirror/write.py WRITE_ATTEMPTS); one that keeps losing
fails the iteration. Transactional: the retry needs the page's own
transaction, rolled back by the server."""

import psycopg
import pytest
from django.db import transaction

from sandboxes import models as m
from sandboxes.mirror import write
from sandboxes.mirror.sync import mirror_once

from .paperclip import termination


@pytest.mark.django_db(transaction=True)
def test_a_page_that_loses_a_deadlock_is_written_again_and_counted_once(
    paperclip, settings, monkeypatch
):
    p = paperclip
    env = p.environment()
    for _ in range(2):
        p.task(env, metadata=lambda row: {"remoteExecutionTermination": termination(row)})
    lost = []
    write_translated = write.write_translated

    def deadlocking(table, translated, report):
        with transaction.atomic():  # all of the page written, then rolled back
            write_translated(table, translated, report)
            if table.name == "environment_leases" and not lost:
                lost.append(table.name)
                raise psycopg.errors.DeadlockDetected("deadlock detected")

    monkeypatch.setattr(write, "write_translated", deadlocking)
    settings.MIRROR_PROCESSES = 1
    report = mirror_once(p.dsn)
    assert lost == ["environment_leases"]
    assert report.tables["environment_leases"].applied == 2, report.summary()
    assert report.receipts == 2 and m.Receipt.objects.count() == 2
    assert report.deadlocks == 1 and "1 pages written again after a deadlock" in report.summary()


@pytest.mark.django_db(transaction=True)
def test_a_page_that_keeps_losing_deadlocks_fails_the_iteration(paperclip, settings, monkeypatch):
    p = paperclip
    p.task(p.environment())
    attempts = []

    def deadlocking(table, translated, report):
        attempts.append(table.name)
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    monkeypatch.setattr(write, "write_translated", deadlocking)
    settings.MIRROR_PROCESSES = 1
    with pytest.raises(psycopg.errors.DeadlockDetected):
        mirror_once(p.dsn)
    # The first page written, three times, and nothing after it.
    assert len(attempts) == write.WRITE_ATTEMPTS and len(set(attempts)) == 1, attempts
