"""The shared COPY staging (sandboxes/staging.py): what goes in comes out,
byte for byte, whatever the text holds."""

import json
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection, transaction
from psycopg import Cursor
from psycopg.types.json import Jsonb

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


# Every column type the console's models have (PostgreSQL), one row each way.
EVERY_TYPE = [
    ("u", "uuid"),
    ("t", "text"),
    ("v", "varchar(12)"),
    ("b", "boolean"),
    ("i", "integer"),
    ("g", "bigint"),
    ("f", "double precision"),
    ("n", "numeric(12, 6)"),
    ("ts", "timestamp with time zone"),
    ("d", "date"),
    ("tm", "time"),
    ("iv", "interval"),
    ("j", "jsonb"),
]
AT = datetime(2026, 11, 1, 12, 30, 5, 123456, tzinfo=UTC)


def typed_row(n: int) -> list:
    return [
        uuid.UUID(int=n + 1),
        NASTY[n % len(NASTY)],
        f"sbx-{n}",
        n % 2 == 0,
        n,
        2**40 + n,
        n / 3,
        Decimal("123456.654321"),
        AT + timedelta(days=n),
        date(2026, 11, 1 + n),
        time(8, n, 1),
        timedelta(days=n, seconds=7),
        Jsonb({"k": NASTY[n % len(NASTY)], "n": [n, None, True]}),
    ]


def staged_with_format(rows):
    """The rows back, and whether the COPY was binary."""
    formats = []
    original = Cursor.copy

    def spy(self, statement, *args, **kwargs):
        formats.append("FORMAT BINARY" in statement.as_string(self))
        return original(self, statement, *args, **kwargs)

    with mock.patch.object(Cursor, "copy", spy):
        _, back = staged_back(EVERY_TYPE, rows)
    return back, formats


def test_a_page_of_exact_types_goes_binary_and_comes_back_the_same():
    rows = [typed_row(n) for n in range(6)] + [[uuid.UUID(int=99)] + [None] * 12]
    back, formats = staged_with_format(rows)
    assert formats == [True]
    expected = [[*r[:-1], None if r[-1] is None else json.dumps(r[-1].obj)] for r in rows]
    assert [[*b[:-1], None if b[-1] is None else json.dumps(json.loads(b[-1]))] for b in back] == [
        [*e[:-1], e[-1]] for e in expected
    ]


@pytest.mark.parametrize(
    "column, value",
    [
        (0, "00000000-0000-0000-0000-000000000001"),  # an id as a string
        (8, AT.replace(tzinfo=None)),  # a naive datetime: the session's zone applies
        (6, 3),  # an integer where a float goes
        (7, 1.5),  # a float where a numeric goes
        (12, {"raw": "dict"}),  # JSON not wrapped: text COPY parses a str as JSON
    ],
)
def test_any_other_value_sends_the_page_as_text_with_the_same_result(column, value):
    rows = [typed_row(n) for n in range(3)]
    odd = list(rows[1])
    odd[column] = value
    if column == 12:
        odd[column] = json.dumps(value)  # as text COPY takes JSON
    back, formats = staged_with_format([rows[0], odd, rows[2]])
    assert formats == [False]
    binary_back, _ = staged_with_format(rows)
    assert back[0] == binary_back[0] and back[2] == binary_back[2]


def test_a_choice_is_text_and_keeps_the_page_binary():
    """A receipt's kind is a TextChoices member (a str): the receipts' pages
    went as text COPY for it."""
    rows = [typed_row(n) for n in range(3)]
    odd = list(rows[1])
    odd[1], odd[2] = m.ReceiptKind.TERMINATION, m.LeaseStatus.RETAINED
    back, formats = staged_with_format([rows[0], odd, rows[2]])
    assert formats == [True]
    assert back[1][1:3] == ("termination", "retained")
    assert type(back[1][1]) is str


def test_a_column_type_without_a_binary_dumper_listed_goes_as_text():
    with transaction.atomic(), raw_cursor() as cur:
        name = stage(cur, "t", [("a", "bigint[]")], [([1, 2],)])
        cur.execute(f'SELECT a FROM "{name}"')
        assert cur.fetchall() == [([1, 2],)]
