"""No index on the tables the mirror and ingest write is a prefix of another:
a btree serves any prefix of its columns, so the shorter one answers nothing
the longer does not, and every insert pays for both (migration 0031). Read
from PostgreSQL's catalog, after every migration has run."""

import pytest
from django.db import connection

from sandboxes import models as m

pytestmark = pytest.mark.django_db

WRITTEN = [
    m.Environment,
    m.Issue,
    m.ExecutionWorkspace,
    m.HeartbeatRun,
    m.EnvironmentLease,
    m.LeaseIntent,
    m.PendingExport,
    m.RecoveryAction,
    m.Receipt,
    m.IngestedEvent,
]

# Pairs (shorter, longer) on one table: same access method, the shorter's
# columns, operator classes and collations a prefix of the longer's, neither
# partial nor on expressions, the shorter not unique (a unique index is a
# constraint, not a duplicate).
PREFIXES = """
SELECT a.indrelid::regclass::text, a.indexrelid::regclass::text, b.indexrelid::regclass::text
  FROM pg_index a
  JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
  JOIN pg_class ca ON ca.oid = a.indexrelid
  JOIN pg_class cb ON cb.oid = b.indexrelid
 WHERE a.indrelid = ANY(%s::regclass[])
   AND NOT a.indisunique
   AND a.indpred IS NULL AND b.indpred IS NULL
   AND a.indexprs IS NULL AND b.indexprs IS NULL
   AND ca.relam = cb.relam
   AND a.indnkeyatts <= b.indnkeyatts
   AND (b.indkey::int2[])[0:a.indnkeyatts - 1] = (a.indkey::int2[])[0:a.indnkeyatts - 1]
   AND (b.indclass::oid[])[0:a.indnkeyatts - 1] = (a.indclass::oid[])[0:a.indnkeyatts - 1]
   AND (b.indcollation::oid[])[0:a.indnkeyatts - 1] = (a.indcollation::oid[])[0:a.indnkeyatts - 1]
 ORDER BY 1, 2
"""


def test_no_index_of_a_written_table_is_a_prefix_of_another():
    with connection.cursor() as cursor:
        cursor.execute(PREFIXES, [[model._meta.db_table for model in WRITTEN]])
        duplicates = cursor.fetchall()
    assert duplicates == []


def test_the_check_finds_a_duplicate_when_there_is_one():
    with connection.cursor() as cursor:
        cursor.execute('CREATE INDEX "probe_lease_issue" ON sandboxes_environmentlease (issue_id)')
        cursor.execute(PREFIXES, [["sandboxes_environmentlease"]])
        duplicates = cursor.fetchall()
    assert duplicates == [("sandboxes_environmentlease", "probe_lease_issue", "lease_issue_status")]
