"""The Paperclip side: a read-only connection and keyset pages of changed rows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

NIL = UUID(int=0)


def connect(dsn: str) -> psycopg.Connection:
    """Every transaction on this connection is read-only, whatever the DSN's
    user may do: the mirror must never change Paperclip."""
    conn = psycopg.connect(
        dsn,
        options="-c default_transaction_read_only=on",
        row_factory=dict_row,
        autocommit=False,
        connect_timeout=10,
    )
    conn.read_only = True
    # One snapshot per iteration: every table is read as of the same moment.
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return conn


def describe(conn: psycopg.Connection) -> str:
    """host:port/dbname, never the password: the cursor key and log label."""
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


def changed_rows(
    conn: psycopg.Connection,
    table: str,
    pk: str,
    since: datetime | None,
    batch_size: int,
) -> Iterator[list[dict]]:
    """Pages of rows with updated_at >= since, in (updated_at, pk) order."""
    after: tuple[datetime, UUID] | None = (since, NIL) if since is not None else None
    while True:
        query = sql.SQL("SELECT * FROM {t} {where} ORDER BY updated_at, {pk} LIMIT {n}").format(
            t=sql.Identifier(table),
            pk=sql.Identifier(pk),
            n=sql.Literal(batch_size),
            where=(
                sql.SQL("WHERE (updated_at, {pk}) > (%s, %s)").format(pk=sql.Identifier(pk))
                if after is not None
                else sql.SQL("")
            ),
        )
        with conn.cursor() as cur:
            cur.execute(query, after or ())
            rows = cur.fetchall()
        if not rows:
            return
        yield rows
        if len(rows) < batch_size:
            return
        last = rows[-1]
        after = (last["updated_at"], last[pk])
