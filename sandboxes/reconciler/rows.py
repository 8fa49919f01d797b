"""Rows read as psycopg returns them, where that is what Django would return
faster: the listing's candidates (candidates.py) and the stop refusals'
receipts (predicates.py) come back as thousands of tuples."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from psycopg import adapters as psycopg_adapters
from psycopg.postgres import types as psycopg_types
from psycopg.pq import Format
from psycopg.types.string import TextLoader

from sandboxes.pg_json import JsonbLoader

# psycopg's own (C) text loader for timestamptz.
_PG_TIMESTAMPTZ = psycopg_adapters.get_loader(psycopg_types["timestamptz"].oid, Format.TEXT)


def fetch_rows(rows: QuerySet, *, uuids_as_text: bool = False) -> list[tuple]:
    """A values_list's rows, on PostgreSQL read as psycopg returns them;
    `uuids_as_text`: each uuid as PostgreSQL writes it, which is str() of the
    UUID (for views that hold ids as strings: ~0.7 µs a str(); elsewhere the
    UUIDs Django returns).

    Django reads every timestamptz through a loader written in Python (~4 µs a
    value, a tenth of a listing at 100k leases) that only swaps the tzinfo for
    Django's; psycopg's own loader returns the same aware datetimes (the session
    time zone is Django's, set on connect). Django reads jsonb as text for
    JSONField to decode with json.loads; `JsonbLoader` decodes the same.
    No other field read here has a converter that changes a psycopg value
    (tests/reconciler/test_candidates.py checks the listing's rows are
    Django's, and tests/reconciler/test_paperclip_predicates.py the stop
    refusals read this way). Not for a JSONField with a decoder of its own."""
    if not psycopg_rows():
        return list(rows)
    return fetch_sql(*rows.query.sql_with_params(), uuids_as_text=uuids_as_text)


def psycopg_rows() -> bool:
    return connection.vendor == "postgresql" and settings.USE_TZ


def fetch_sql(sql: str, params: Sequence, *, uuids_as_text: bool = False) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.cursor.adapters.register_loader("timestamptz", _PG_TIMESTAMPTZ)
        cursor.cursor.adapters.register_loader("jsonb", JsonbLoader)
        if uuids_as_text:
            cursor.cursor.adapters.register_loader("uuid", TextLoader)
        cursor.execute(sql, params)
        return cursor.fetchall()
