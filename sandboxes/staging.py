"""COPY staging on PostgreSQL: a page's rows stream into a session temp table
through psycopg's C adapters, then one set-based statement merges them into
the target (docs/architecture.md, "Recorded"). The mirror's pages of
thousands of rows per table go this way; ingest's batches do not
(sandboxes/ingest/sql.py says why).

Django's psycopg backend binds client-side, quoting every value into the SQL
text in Python; COPY sends the rows in one stream, typed by the staging
table's columns, with no statement text to build or parse per row. When every
value is of the Python type its column's binary dumper takes (`_BINARY`), the
stream is binary, dumped by psycopg's C dumpers by column type: about 40 %
less client time than text, and no text for the server to parse. A page with
any other value (an id as a string, a naive datetime) goes as text, which the
server parses as before.

Runs on psycopg's own connection under Django's, inside the caller's
transaction: the staging table is ON COMMIT DELETE ROWS.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import orjson
from django.db import connection, models
from psycopg import Cursor, sql
from psycopg.types.json import Jsonb

from sandboxes import pg_json


def adapt(field: models.Field, value: Any) -> Any:
    """A model field's value as COPY takes it (json wrapped, a row as its key)."""
    if value is None:
        return None
    if isinstance(field, models.JSONField):
        return Jsonb(value, dumps=pg_json.dumps)
    if isinstance(field, models.ForeignKey) and isinstance(value, models.Model):
        return value.pk
    return value


def db_type(field: models.Field) -> str:
    """The column type of a concrete field (a ForeignKey's is its target's
    rel_db_type: Django's ForeignKey.db_type)."""
    found = field.db_type(connection)
    if found is None:  # a many-to-many or a reverse relation: no column of its own
        raise TypeError(f"{field} has no column to write")
    return found


def model_defaults(
    model: type[models.Model], given: set[models.Field]
) -> list[tuple[models.Field, object]]:
    """(field, value): the model's defaults for every column but its primary
    key and the `given` ones, as the ORM would write them (the default, ""
    for blank text); a nullable column without a default is left NULL."""
    constants = []
    for f in model._meta.concrete_fields:
        if f in given or f.primary_key:
            continue
        value = f.get_default()
        if value is not None:
            constants.append((f, value))
        elif not f.null:
            raise ValueError(f"{model.__name__}.{f.name} has no value and no default")
    return constants


def uuid_array(ids: Iterable[uuid.UUID]) -> str:
    """A PostgreSQL uuid[] literal of these ids (`%s::uuid[]`): one string
    written in C, where psycopg dumps a list of UUIDs one element at a time and
    Django's client-side binding quotes each on its own. orjson writes each id
    as str() does (`["…","…"]`: the brackets and quotes dropped), ~10x faster
    than str() of each (~0.7 µs a UUID)."""
    listed = orjson.dumps(list(ids))[1:-1].replace(b'"', b"")
    return "{" + listed.decode() + "}"


def raw_cursor() -> Cursor:
    """A psycopg cursor on Django's connection (server-side binding, COPY);
    the caller closes it. Inside a transaction: staged rows live until commit."""
    if not connection.in_atomic_block:
        # The staging table empties at every commit: COPY and merge must share one.
        raise RuntimeError("staging runs inside transaction.atomic()")
    connection.ensure_connection()
    return Cursor(connection.connection)


# The Python types each column type's binary dumper takes, by the type's base
# name (`_base`); a column of any other type always goes as text.
_BINARY: dict[str, frozenset[type]] = {
    "uuid": frozenset({uuid.UUID}),
    "text": frozenset({str}),
    "varchar": frozenset({str}),
    "boolean": frozenset({bool}),
    "smallint": frozenset({int}),
    "integer": frozenset({int}),
    "bigint": frozenset({int}),
    "double precision": frozenset({float}),
    "numeric": frozenset({Decimal}),
    "timestamp with time zone": frozenset({datetime}),
    "date": frozenset({date}),
    "time": frozenset({time}),
    "interval": frozenset({timedelta}),
    "jsonb": frozenset({Jsonb}),
}
_NONE = type(None)


def _base(kind: str) -> str:
    """A column type without its modifier: varchar(64) → varchar."""
    return re.sub(r"\(.*\)$", "", kind).strip()


def _binary(columns: Sequence[tuple[str, str]], rows: list[Sequence[Any]]) -> bool:
    """Whether every value is of a type its column's binary dumper takes
    (and every datetime aware: a naive one is the session's time zone's,
    which only the server's text parsing applies)."""
    found = [_BINARY.get(_base(kind)) for _, kind in columns]
    takes = [allowed for allowed in found if allowed is not None]
    if len(takes) < len(found):
        return False
    # The rows' type signatures: a page holds a handful of distinct ones.
    for signature in {tuple(map(type, row)) for row in rows}:
        for kind, allowed in zip(signature, takes, strict=True):
            if kind is _NONE or kind in allowed:
                continue
            # A choice (Django's TextChoices: a str) is written as its str;
            # bool, an int, is not taken for an integer column.
            if not (str in allowed and issubclass(kind, str)):
                return False
    aware = _BINARY["timestamp with time zone"]
    stamps = [i for i, allowed in enumerate(takes) if allowed is aware]
    return not any(row[i] is not None and row[i].tzinfo is None for i in stamps for row in rows)


def stage(
    cur: Cursor,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[Any]],
    *,
    prefix: str = "stage",
) -> str:
    """COPY `rows` (values in `columns`' order: (column, SQL type)) into the
    session's staging table for (`table`, `columns`); its name.

    One staging table per (table, columns), kept for the session: creating
    and dropping one per batch churned the catalog. Emptied before each use
    (a savepoint rolled back may leave rows the commit has not yet cleared)."""
    columns_sql = ", ".join(f"{name} {kind}" for name, kind in columns)
    digest = hashlib.sha1(f"{table}({columns_sql})".encode()).hexdigest()[:16]
    name = f"_{prefix}_{digest}"
    # No parameters: both statements go in one round trip.
    cur.execute(
        sql.SQL(
            "CREATE TEMP TABLE IF NOT EXISTS {stage} ({cols}) ON COMMIT DELETE ROWS;"
            " TRUNCATE {stage}"
        ).format(
            stage=sql.Identifier(name),
            cols=sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(column), sql.SQL(kind))
                for column, kind in columns
            ),
        )
    )
    rows = list(rows)  # a page: checked for the binary format, then sent
    binary = _binary(columns, rows)
    with cur.copy(
        sql.SQL("COPY {} ({}) FROM STDIN{}").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.Identifier(column) for column, _ in columns),
            sql.SQL(" (FORMAT BINARY)" if binary else ""),
        )
    ) as copy:
        if binary:
            copy.set_types([_base(kind) for _, kind in columns])
        for row in rows:
            copy.write_row(row)
    return name


def stage_fields(
    cur: Cursor,
    table: str,
    keys: Sequence[str],
    fields: Sequence[models.Field],
    records: Iterable[dict],
    *,
    prefix: str = "stage",
) -> str:
    """`stage` of model records (`keys` → value; each key's field in `fields`),
    JSON wrapped and a row given for a foreign key as its key (`adapt`)."""
    # `adapt` unrolled: a call per row and JSON or foreign-key column, else.
    json_at = [i for i, f in enumerate(fields) if isinstance(f, models.JSONField)]
    key_at = [i for i, f in enumerate(fields) if isinstance(f, models.ForeignKey)]
    dumps = pg_json.dumps

    def values(record: dict) -> list[Any]:
        row = list(map(record.get, keys))
        for i in json_at:
            if row[i] is not None:
                row[i] = Jsonb(row[i], dumps=dumps)
        for i in key_at:
            value = row[i]
            if isinstance(value, models.Model):
                row[i] = value.pk
        return row

    return stage(
        cur,
        table,
        [(f.column, db_type(f)) for f in fields],
        (values(record) for record in records),
        prefix=prefix,
    )
