"""The mirror writes a page in a fixed number of statements, whatever its size
(GUIDE: query counts are asserted). Counted on both paths: the ORM's queries
(CaptureQueriesContext) and the statements sandboxes/mirror/bulk.py and
write.py send through psycopg cursors of their own (COPY included)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sandboxes.mirror import bulk, write
from sandboxes.mirror.sync import mirror_once

from .counting import Counting
from .paperclip import termination

pytestmark = pytest.mark.django_db


def statements_to_mirror(paperclip, n: int, monkeypatch) -> int:
    p = paperclip
    p.truncate()
    env = p.environment()
    for _ in range(n):
        issue, _, run, lease = p.task(
            env, metadata=lambda row: {"remoteExecutionTermination": termination(row)}
        )
        p.recovery_action(issue, [lease], status="resolved")
        p.save(run, lease, {"a.txt": "a"})
    monkeypatch.setattr(bulk, "Cursor", Counting)
    monkeypatch.setattr(write, "Cursor", Counting)
    Counting.statements = 0
    with CaptureQueriesContext(connection) as orm:
        report = mirror_once(p.dsn, full=True)
    assert report.rows_read >= 6 * n and not report.problems, report.summary()
    return len(orm.captured_queries) + Counting.statements


def test_a_page_costs_the_same_number_of_statements_at_any_size(paperclip, monkeypatch):
    small = statements_to_mirror(paperclip, 3, monkeypatch)
    large = statements_to_mirror(paperclip, 40, monkeypatch)
    assert small == large, (small, large)
    assert large <= 60  # 7 tables, one page each


@pytest.mark.django_db(transaction=True)
def test_the_bulk_writer_refuses_to_run_outside_a_transaction():
    from sandboxes import models as m

    with pytest.raises(RuntimeError, match="atomic"):
        bulk.upsert(m.Issue, [{"id": "00000000-0000-4000-8000-000000000001"}], update=None)
