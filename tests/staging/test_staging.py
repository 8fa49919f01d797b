"""The shared COPY staging (sandboxes/staging.py): what goes in comes out,
byte for byte, whatever the text holds."""

import json

import pytest
from django.db import connection, transaction

from sandboxes import models as m
from sandboxes.staging import adapt, raw_cursor, stage, stage_fields

pytestmark = pytest.mark.django_db

NASTY = [
    'it\'s "quoted"',
    "back\\slash \\N \\t",
    "new\nline\r\nand\ttab",
    "",
    "ünïcødé — 日本語 🦀",
    "comma, semicolon; |pipe|",
]


def staged_back(columns, rows):
    with transaction.atomic(), raw_cursor() as cur:
        name = stage(cur, "t", columns, rows)
        cur.execute(f'SELECT * FROM "{name}" ORDER BY 1')
        return name, cur.fetchall()


def test_text_with_quotes_backslashes_newlines_and_unicode_survives():
    rows = [(i, text) for i, text in enumerate(NASTY)] + [(len(NASTY), None)]
    _, back = staged_back([("n", "integer"), ("s", "text")], rows)
    assert back == rows


def test_json_survives_as_json_and_null_stays_sql_null():
    field = m.EnvironmentLease._meta.get_field("metadata")
    docs = [{"k": text, "nested": [1, None, {"t": True}]} for text in NASTY] + [None, {}, []]
    rows = [(i, adapt(field, doc)) for i, doc in enumerate(docs)]
    _, back = staged_back([("n", "integer"), ("j", "jsonb")], rows)
    # Django's connection loads jsonb as text (JSONField parses it itself).
    assert [None if j is None else json.loads(j) for _, j in back] == docs
    with transaction.atomic(), raw_cursor() as cur:
        name = stage(cur, "t", [("n", "integer"), ("j", "jsonb")], rows)
        cur.execute(f'SELECT count(*) FROM "{name}" WHERE j IS NULL')
        assert cur.fetchone()[0] == 1  # None is SQL NULL, not the json 'null'


def test_one_table_per_target_and_columns_emptied_before_each_use():
    with transaction.atomic(), raw_cursor() as cur:
        first = stage(cur, "t", [("n", "integer")], [(1,), (2,)])
        again = stage(cur, "t", [("n", "integer")], [(3,)])
        other = stage(cur, "t", [("n", "bigint")], [(4,)])
        cur.execute(f'SELECT n FROM "{again}"')
        assert cur.fetchall() == [(3,)]
    assert first == again != other


@pytest.mark.django_db(transaction=True)
def test_rows_are_gone_at_commit():
    with transaction.atomic(), raw_cursor() as cur:
        name = stage(cur, "t", [("n", "integer")], [(1,)])
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{name}"')
        assert cursor.fetchone()[0] == 0


def test_model_records_stage_by_field():
    meta = m.Issue._meta
    keys = ["id", "title", "company_id"]
    fields = [meta.get_field(k) for k in keys]
    records = [{"id": "00000000-0000-4000-8000-000000000001", "title": NASTY[2]}]
    with transaction.atomic(), raw_cursor() as cur:
        name = stage_fields(cur, meta.db_table, keys, fields, records)
        cur.execute(f'SELECT id::text, title, company_id FROM "{name}"')
        assert cur.fetchall() == [(records[0]["id"], NASTY[2], None)]


@pytest.mark.django_db(transaction=True)
def test_staging_refuses_to_run_outside_a_transaction():
    with pytest.raises(RuntimeError, match="atomic"):
        raw_cursor()
