"""The database edge of the ingest apply (`sandboxes.ingest.apply`): on
PostgreSQL one statement records the event ids, one reads every table's rows,
one inserts every table's new rows and the receipts, and one UPDATE per table
changes rows that existed.

On PostgreSQL the rows travel as one JSON document per table
(`json_to_recordset`); elsewhere (the embedded SQLite) through the ORM. Rows
come and go as plain values (dicts by attname): the batch that holds them is
`batch.py`'s unit of work, which calls these.

Not COPY staging (`sandboxes/staging.py`, the mirror's): a batch of 1,000
events writes a few hundred rows into each of up to eight tables, and staging
each costs a TRUNCATE of its temp table (0.75 ms: load_events shares one
transaction, so the rows must go before the next batch) and two more round
trips, where orjson writes every table's document in C. Measured on 30,000
events, load_events took 4.3-4.6 s staged against 3.2-3.6 s with documents;
the server's time is in the tables' indexes, foreign keys and triggers, the
same either way.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast
from uuid import UUID

from django.db import connection, models
from django.utils import timezone

from sandboxes.models import EnvironmentLease, IngestedEvent, Receipt
from sandboxes.models.mirror import MirroredModel
from sandboxes.rules.release import release_status, release_status_sql

from .schemas import Event

_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - a venv installed before it was a dependency
    _orjson = None

Mirrored = type[MirroredModel]

# SQL for a column whose value is computed from the staged row `r`.
_COLUMN_SQL: dict[Mirrored, dict[str, str]] = {
    EnvironmentLease: {"status": release_status_sql('r."status"', 'r."disposition"')},
}


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def _fields(model: type[models.Model]) -> list[models.Field]:
    return [f for f in model._meta.concrete_fields if not isinstance(f, models.AutoField)]


def _is_timestamp(field: models.Field) -> bool:
    return bool(getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))


_DEFAULTS: dict[type[models.Model], dict[str, Any]] = {}


def column_defaults(model: type[models.Model]) -> dict[str, Any]:
    """Every column's default, by attname (what a new row holds unless set)."""
    if model not in _DEFAULTS:
        _DEFAULTS[model] = {
            f.attname: f.get_default() for f in _fields(model) if not _is_timestamp(f)
        }
    return _DEFAULTS[model]


def _json(value: Any) -> Any:
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()} seconds"
    raise TypeError(f"cannot send {type(value).__name__} to the database")


def _document(rows: Iterable[dict[str, Any]]) -> str:
    listed = list(rows)
    if _orjson is None:  # pragma: no cover
        return json.dumps(listed, default=_json, ensure_ascii=False, separators=(",", ":"))
    try:
        # orjson writes uuids and datetimes itself (json.dumps calls back into
        # Python for each): a third of a batch's cost before it.
        return _orjson.dumps(listed, default=_json).decode()
    except TypeError:  # an integer beyond 64 bits in free-form JSON, say
        return json.dumps(listed, default=_json, ensure_ascii=False, separators=(",", ":"))


def _record_type(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{_qn(name)} {db_type}" for name, db_type in columns)


# Columns every read has, in this order, first (`batch._ALWAYS`).
_SHARED = ("id", "placeholder", "source_updated_at")
# A row's id: the canonical string (batch.Id), as the schemas type it.
Read = tuple[Mirrored, tuple[str, ...], set[str | UUID]]


def read_rows(reads: list[Read]) -> list[list[dict[str, Any]]]:
    """The rows with these ids (canonical strings), per read (model, columns,
    ids), each row's id back as the same string; locked, table by table in
    name order and in id order within each, so that batches lock in one order.
    On PostgreSQL in one statement for every table (`_read_sql`)."""
    if not _postgres():
        return [_read_rows_orm(model, columns, ids) for model, columns, ids in reads]
    order = sorted(range(len(reads)), key=lambda i: reads[i][0]._meta.db_table)
    sql, where = _read_sql(tuple((reads[i][0], reads[i][1]) for i in order))
    params = [_array(reads[i][2]) for i in order]
    out: list[list[dict[str, Any]]] = [[] for _ in reads]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            n = row[0]
            columns = reads[order[n]][1]
            out[order[n]].append({c: row[p] for c, p in zip(columns, where[n], strict=True)})
    return out


def _array(ids: Iterable[str | UUID]) -> str:
    """A PostgreSQL array literal of these ids. Every element is quoted: a
    Paperclip user's id is free text (better-auth's), uuids need no escape."""
    quoted = (str(pk).replace("\\", "\\\\").replace('"', '\\"') for pk in ids)
    return "{" + ",".join(f'"{pk}"' for pk in quoted) + "}"


def _pk_type(model: type[models.Model]) -> str:
    """The id column's type: uuid for every mirrored row but a Paperclip user's (text)."""
    return model._meta.pk.db_type(connection) or "uuid"


@functools.cache
def _read_sql(
    reads: tuple[tuple[Mirrored, tuple[str, ...]], ...],
) -> tuple[str, list[list[int]]]:
    """The statement reading these tables' rows (one id array parameter each,
    in this order), and where each table's columns are in a result row (after
    its number in `reads`, in column 0).

    Each table's rows come from a WITH query that locks them; the queries'
    rows are side by side in one UNION ALL: the shared columns first, then
    one place per table's own column, NULL in the other tables' rows."""
    own = [(i, c) for i, (_, columns) in enumerate(reads) for c in columns if c not in _SHARED]
    place = {key: 1 + len(_SHARED) + n for n, key in enumerate(own)}
    ctes, selects = [], []
    for i, (model, columns) in enumerate(reads):
        assert columns[: len(_SHARED)] == _SHARED, columns
        # The id as text: ids as the fold keys them.
        picked = [f"t.{_qn('id')}::text AS id"]
        picked += [f"t.{_qn(model_field(model, c).column)}" for c in columns[1:]]
        ctes.append(
            f"r{i} AS (SELECT {', '.join(picked)} FROM {_qn(model._meta.db_table)} AS t "
            f"WHERE t.{_qn('id')} = ANY(%s::{_pk_type(model)}[]) ORDER BY t.{_qn('id')} FOR UPDATE)"
        )
        values = [f"r{i}.{_qn(model_field(model, c).column)}" for c in _SHARED[1:]]
        values += [
            f"r{i}.{_qn(model_field(model, c).column)}"
            if j == i
            else f"NULL::{model_field(reads[j][0], c).db_type(connection)}"
            for j, c in own
        ]
        selects.append(f"SELECT {i}, r{i}.id, {', '.join(values)} FROM r{i}")
    sql = f"WITH {', '.join(ctes)} {' UNION ALL '.join(selects)}"
    where = [
        [1 + _SHARED.index(c) if c in _SHARED else place[(i, c)] for c in columns]
        for i, (_, columns) in enumerate(reads)
    ]
    return sql, where


def _read_rows_orm(
    model: Mirrored, columns: tuple[str, ...], ids: set[str | UUID]
) -> list[dict[str, Any]]:
    rows = list(model._default_manager.filter(pk__in=ids).values(*columns))
    for row in rows:
        row["id"] = str(row["id"])
    return rows


def record_event_ids(source: str, events: list[Event]) -> set[str]:
    """Record the batch's event ids for `source`; returns those not seen before
    (one INSERT … ON CONFLICT DO NOTHING RETURNING: a concurrent batch carrying
    the same id waits for the other to commit, then finds it a duplicate).
    Rolled back with the batch if it is refused."""
    if not events:
        return set()
    if _postgres():
        # The source once, as a parameter, not in each of the document's rows.
        document = _document({"event_id": e.id, "type": e.type} for e in events)
        with connection.cursor() as cursor:
            cursor.execute(_record_ids_sql(), [source, document])
            return {r[0] for r in cursor.fetchall()}
    rows = [{"source": source, "event_id": e.id, "type": e.type} for e in events]
    ids = [e.id for e in events]
    seen = set(
        IngestedEvent.objects.filter(source=source, event_id__in=ids).values_list(
            "event_id", flat=True
        )
    )
    unique = {row["event_id"]: row for row in rows if row["event_id"] not in seen}
    _insert(IngestedEvent, list(unique.values()), ignore_conflicts=False)
    return set(unique)


@functools.cache
def _record_ids_sql() -> str:
    fields = {f.attname: f for f in _fields(IngestedEvent)}
    source, event_id, type_, received_at = (
        _qn(fields[name].column) for name in ("source", "event_id", "type", "received_at")
    )
    record = _record_type(
        (fields[name].column, fields[name].db_type(connection) or "text")
        for name in ("event_id", "type")
    )
    return (
        f"INSERT INTO {_qn(IngestedEvent._meta.db_table)} "
        f"({source}, {event_id}, {type_}, {received_at}) "
        f"SELECT %s, r.{event_id}, r.{type_}, clock_timestamp() "
        f"FROM json_to_recordset(%s::json) AS r({record}) "
        f"ON CONFLICT DO NOTHING RETURNING {event_id}"
    )


def insert_new(
    inserts: list[tuple[Mirrored, list[dict[str, Any]]]], receipts: list[dict[str, Any]]
) -> dict[Mirrored, set[Any]]:
    """Each table's new rows (values by attname, ON CONFLICT DO NOTHING) and
    the batch's receipts; the ids each table's INSERT inserted. On PostgreSQL
    in one statement (`_insert_all`), whose INSERTs fill in the defaults
    themselves (`_insert_plan`)."""
    if _postgres():
        return _insert_all([(model, rows) for model, rows in inserts if rows], receipts)
    inserted = {}
    for model, rows in inserts:
        full = [{**column_defaults(model), **row} for row in rows]
        inserted[model] = _insert(model, full, ignore_conflicts=True, returning=("id",))
    _insert(Receipt, receipts, ignore_conflicts=True)
    return inserted


def _insert_all(
    inserts: list[tuple[Mirrored, list[dict[str, Any]]]], receipts: list[dict[str, Any]]
) -> dict[Mirrored, set[Any]]:
    """Each table's new rows (ON CONFLICT DO NOTHING) and the receipts in one
    statement, a WITH query each; the ids each table's INSERT inserted."""
    if not inserts:
        _insert(Receipt, receipts, ignore_conflicts=True)
        return {}
    ctes, params = [], []
    for k, (model, rows) in enumerate(inserts):
        plan = _insert_plan(model, True, ())
        ctes.append(f"i{k} AS ({plan.sql} RETURNING {k} AS k, {_qn('id')}::text AS id)")
        params.append(plan.document(rows))
    if receipts:
        plan = _insert_plan(Receipt, True, ())
        ctes.append(f"receipts AS ({plan.sql})")
        params.append(plan.document(receipts))
    union = " UNION ALL ".join(f"SELECT k, id FROM i{k}" for k in range(len(inserts)))
    inserted: dict[Mirrored, set[Any]] = {model: set() for model, _ in inserts}
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} {union}", params)
        for k, pk in cursor.fetchall():
            inserted[inserts[k][0]].add(pk)
    return inserted


def model_field(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field):  # pragma: no cover - attnames only
        raise TypeError(f"{model.__name__}.{name} is not a column")
    return field


@dataclass(frozen=True)
class _InsertPlan:
    sql: str
    # Every staged column's default, by column: a row's document is these,
    # overlaid with the row's own values.
    base: dict[str, Any]
    # (column, attname) of the columns whose name differs from their attname.
    renamed: tuple[tuple[str, str], ...]

    def document(self, rows: list[dict[str, Any]]) -> str:
        base = self.base
        if not self.renamed:
            return _document([{**base, **row} for row in rows])
        out = []
        for row in rows:
            values = {**base, **row}
            for column, name in self.renamed:
                values[column] = row.get(name, base[column])
            out.append(values)
        return _document(out)


@functools.cache
def _insert_plan(
    model: type[models.Model], ignore_conflicts: bool, returning: tuple[str, ...]
) -> _InsertPlan:
    """The INSERT statement of a model and how its rows become its document
    (built once per model, not per batch)."""
    fields = _fields(model)
    computed = _COLUMN_SQL.get(cast(Mirrored, model), {})
    staged = [f for f in fields if not _is_timestamp(f)]
    values = [
        "clock_timestamp()" if _is_timestamp(f) else computed.get(f.attname, f"r.{_qn(f.column)}")
        for f in fields
    ]
    record = _record_type((f.column, f.db_type(connection) or "text") for f in staged)
    sql = (
        f"INSERT INTO {_qn(model._meta.db_table)} ({', '.join(_qn(f.column) for f in fields)}) "
        f"SELECT {', '.join(values)} FROM json_to_recordset(%s::json) AS r({record})"
    )
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    if returning:  # as text: ids as the fold keys them
        sql += " RETURNING " + ", ".join(f"{_qn(c)}::text" for c in returning)
    defaults = column_defaults(model)
    return _InsertPlan(
        sql=sql,
        base={f.column: defaults[f.attname] for f in staged},
        renamed=tuple((f.column, f.attname) for f in staged if f.column != f.attname),
    )


def _insert(
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    ignore_conflicts: bool,
    returning: tuple[str] | tuple[()] = (),
) -> set[Any]:
    """Insert `rows` (values by attname) in one statement; with `returning`,
    the ids it inserted (a conflict inserts nothing)."""
    if not rows:
        return set()
    if not _postgres():
        if model is EnvironmentLease:
            for row in rows:
                if row["status"] is None:
                    row["status"] = release_status(row["disposition"])
        objs = [model(**row) for row in rows]
        model._default_manager.bulk_create(objs, ignore_conflicts=ignore_conflicts)
        return {str(row.get("id")) for row in rows}
    plan = _insert_plan(model, ignore_conflicts, returning)
    with connection.cursor() as cursor:
        cursor.execute(plan.sql, [plan.document(rows)])
        if not returning:
            return set()
        return {r[0] for r in cursor.fetchall()}


def update(model: Mirrored, rows: list[tuple[dict[str, Any], set[str]]]) -> None:
    """One UPDATE: each row (its values by attname) gets the columns its events
    set (the second of each pair), and only when the
    batch's source time is not older than the row's (docs/rules.md, "Which rows
    are judged": the newer source time wins)."""
    if not _postgres():
        _update_orm(model, rows)
        return
    sent: set[str] = set().union(*(cols for _, cols in rows))
    if model is EnvironmentLease and "status" in sent:
        sent.add("disposition")  # the release rule reads it (`_COLUMN_SQL`)
    names = sorted(sent)
    bit = {name: 1 << i for i, name in enumerate(names)}
    fields = {name: model_field(model, name) for name in names}
    computed = _COLUMN_SQL.get(model, {})
    record = _record_type(
        [
            ("id", _pk_type(model)),
            ("_sent", "bigint"),
            ("source_updated_at", "timestamp with time zone"),
            *((f.column, f.db_type(connection) or "text") for f in fields.values()),
        ]
    )
    assignments = [
        f"{_qn(f.column)} = CASE WHEN r._sent & {bit[n]} <> 0 "
        f"THEN {computed.get(n, f'r.{_qn(f.column)}')} ELSE t.{_qn(f.column)} END"
        for n, f in fields.items()
    ]
    assignments += [
        f"{_qn('placeholder')} = false",
        f"{_qn('source_updated_at')} = r.{_qn('source_updated_at')}",
        f"{_qn('updated_at')} = clock_timestamp()",
    ]
    document = _document(
        {
            "id": values["id"],
            "_sent": sum(bit[c] for c in cols),
            "source_updated_at": values["source_updated_at"],
            **{fields[c].column: values[c] for c in cols},
        }
        for values, cols in rows
    )
    sql = (
        f"UPDATE {_qn(model._meta.db_table)} AS t SET {', '.join(assignments)} "
        f"FROM json_to_recordset(%s::json) AS r({record}) "
        f"WHERE t.{_qn('id')} = r.{_qn('id')} AND (t.{_qn('source_updated_at')} IS NULL "
        f"OR r.{_qn('source_updated_at')} >= t.{_qn('source_updated_at')})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [document])


def _update_orm(model: Mirrored, rows: list[tuple[dict[str, Any], set[str]]]) -> None:
    """The same through the ORM (the embedded SQLite: one writer at a time, and
    the rows were read in this transaction), grouped by the columns set."""
    now = timezone.now()
    groups: dict[frozenset[str], list[dict[str, Any]]] = defaultdict(list)
    for row, cols in rows:
        groups[frozenset(cols)].append(row)
    for columns, group in groups.items():
        objs = []
        for row in group:
            values: dict[str, Any] = {c: row[c] for c in columns}
            if model is EnvironmentLease and values.get("status", "") is None:
                values["status"] = release_status(row["disposition"])
            values.update(
                id=row["id"],
                placeholder=False,
                source_updated_at=row["source_updated_at"],
                updated_at=now,
            )
            objs.append(model(**values))
        model._default_manager.bulk_update(
            objs, [*sorted(columns), "placeholder", "source_updated_at", "updated_at"]
        )
