"""COPY staging on PostgreSQL, shared by the mirror and ingest: a batch's rows
stream into a session temp table through psycopg's C adapters, then one
set-based statement merges them into the target (docs/architecture.md,
"Recorded").

Django's psycopg backend binds client-side, quoting every value into the SQL
text in Python; COPY sends the rows in one stream, typed by the staging
table's columns, with no statement text to build or parse per row.

Runs on psycopg's own connection under Django's, inside the caller's
transaction: the staging table is ON COMMIT DELETE ROWS.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, models
from psycopg import Cursor, sql
from psycopg.types.json import Jsonb


def adapt(field: models.Field, value: Any) -> Any:
    """A model field's value as COPY takes it (json wrapped, a row as its key)."""
    if value is None:
        return None
    if isinstance(field, models.JSONField):
        return Jsonb(value)
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


def raw_cursor() -> Cursor:
    """A psycopg cursor on Django's connection (server-side binding, COPY);
    the caller closes it. Inside a transaction: staged rows live until commit."""
    if not connection.in_atomic_block:
        # The staging table empties at every commit: COPY and merge must share one.
        raise RuntimeError("staging runs inside transaction.atomic()")
    connection.ensure_connection()
    return Cursor(connection.connection)


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
    with cur.copy(
        sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.Identifier(column) for column, _ in columns),
        )
    ) as copy:
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
    """`stage` of model records (`keys` → value; each key's field in `fields`)."""
    pairs = list(zip(keys, fields, strict=True))
    return stage(
        cur,
        table,
        [(f.column, db_type(f)) for f in fields],
        ([adapt(f, record.get(k)) for k, f in pairs] for record in records),
        prefix=prefix,
    )
