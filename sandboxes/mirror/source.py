"""The Paperclip side: a read-only connection, what its schema holds, and the
changed rows of one table streamed in (updated_at, key) order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row, tuple_row

from sandboxes.pg_json import JsonbLoader

# The mirror reads every Paperclip row as a dict (the connection's row factory).
Connection = psycopg.Connection[DictRow]


def connect(dsn: str) -> Connection:
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
    # Paperclip's jsonb (lease metadata, a run's context) as json.loads reads it, ~5x faster.
    conn.adapters.register_loader("jsonb", JsonbLoader)
    conn.adapters.register_loader("json", JsonbLoader)
    # One snapshot per iteration: every table is read as of the same moment.
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return conn


def describe(conn: Connection) -> str:
    """host:port/dbname, never the password: the cursor key and log label."""
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


def snapshot(conn: Connection) -> str | None:
    """What this transaction sees of the source, as one string: the database,
    the server's start and the transaction's snapshot (xmin:xmax:in-progress).
    Equal strings, equal data in every table: any write that committed since
    moved xmax or the in-progress list, a dropped and recreated database has
    another oid, a restarted or other server another start. None before
    PostgreSQL 13 (no pg_current_snapshot): every iteration reads.

    Must be the transaction's first statement under REPEATABLE READ: the
    snapshot it reports is the one every later read uses."""
    if conn.info.server_version < 130000:
        return None
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            "SELECT d.oid, pg_postmaster_start_time(), pg_current_snapshot()::text"
            " FROM pg_catalog.pg_database d WHERE d.datname = current_database()"
        )
        row = cur.fetchone()
    if row is None:  # pragma: no cover - current_database() is always listed
        return None
    oid, started, visible = row
    return f"{oid}/{started.isoformat()}/{visible}"


def export_snapshot(conn: Connection) -> str | None:
    """An id another session can read this transaction's snapshot by
    (`import_snapshot`, while this transaction is open), or None on a standby,
    where the mirror reads in one process. Not under a savepoint: PostgreSQL
    exports no snapshot from a subtransaction."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            "SELECT CASE WHEN NOT pg_catalog.pg_is_in_recovery()"
            " THEN pg_catalog.pg_export_snapshot() END"
        )
        row = cur.fetchone()
    return row[0] if row else None


def import_snapshot(conn: Connection, snapshot_id: str) -> None:
    """Read, in this transaction, what the exporting one sees (the exporter
    must still be open). Must be the transaction's first statement."""
    with conn.cursor() as cur:
        cur.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_id)))


def columns_by_table(conn: Connection, tables: Iterable[str]) -> dict[str, set[str]]:
    """The columns each table has in the connection's search path; a table that
    does not exist (an older Paperclip) is absent from the answer."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            """
            SELECT c.relname AS table_name, a.attname AS column_name
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
             WHERE c.relname = ANY(%s)
               AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
               AND pg_catalog.pg_table_is_visible(c.oid)
               AND a.attnum > 0 AND NOT a.attisdropped
            """,
            [list(tables)],
        )
        out: dict[str, set[str]] = {}
        for row in cur.fetchall():
            out.setdefault(row["table_name"], set()).add(row["column_name"])
    return out


@dataclass(frozen=True)
class Share:
    """One of `count` mirror processes' part of a table: the rows whose key
    hashes to `index` (PostgreSQL's hashtext of the key as text, the same in
    every process of an iteration, which all read one server). Random keys
    (uuids) share evenly."""

    index: int
    count: int

    @staticmethod
    def of(pk: str) -> sql.Composable:
        """The share a row is in, of as many as the parameter says."""
        # The hash's sign bit dropped: mod() of a negative number is negative.
        return sql.SQL("mod(pg_catalog.hashtext({}::text) & 2147483647, %s)").format(
            sql.Identifier(pk)
        )

    def condition(self, pk: str) -> tuple[sql.Composable, list[int]]:
        return sql.SQL("{} = %s").format(self.of(pk)), [self.count, self.index]


def changed_rows(
    conn: Connection,
    table: str,
    pk: str,
    columns: Iterable[str],
    since: datetime | None,
    batch_size: int,
    share: Share | None = None,
) -> Iterator[list[DictRow]]:
    """Pages of `columns` of the rows with updated_at >= since, in (updated_at,
    pk) order, from ONE server-side cursor: one scan and one sort per table
    per iteration, whatever the number of pages (Paperclip has no index on
    most tables' updated_at, and the mirror cannot add one). With `share`,
    only that share of the rows (`Share`)."""
    conditions: list[sql.Composable] = []
    params: list[object] = []
    if since is not None:
        conditions.append(sql.SQL("updated_at >= %s"))
        params.append(since)
    if share is not None:
        condition, values = share.condition(pk)
        conditions.append(condition)
        params += values
    query = sql.SQL("SELECT {cols} FROM {t} {where} ORDER BY updated_at, {pk}").format(
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        t=sql.Identifier(table),
        pk=sql.Identifier(pk),
        where=sql.SQL("WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL(""),
    )
    with conn.cursor(name=f"mirror_{table}") as cur:
        cur.itersize = batch_size
        cur.execute(query, params)
        while True:
            rows = cur.fetchmany(batch_size)
            if not rows:
                return
            yield rows
            if len(rows) < batch_size:
                return
