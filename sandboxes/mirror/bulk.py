"""Set-based writes for the mirror: COPY a page into a staging table, then one
INSERT … SELECT … ON CONFLICT into the model's table.

The ORM's bulk_create quotes every value into the SQL text in Python (Django's
psycopg backend binds client-side) and spent most of a mirror iteration there.
COPY hands the rows to PostgreSQL in one stream through psycopg's C adapters;
the upsert is then one statement per page. The model's Python-side defaults
(Django declares no column defaults) fill what a page does not carry, so a
new row is the same row the ORM would have written. The staging itself is
shared with ingest (`sandboxes/staging.py`).

Runs on Django's own connection, inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from django.db import connection, models
from django.db.models.options import Options
from django.utils import timezone
from psycopg import Cursor, sql

from sandboxes.staging import adapt, db_type, model_defaults, stage_fields, uuid_array


def _field(meta: Options, key: str) -> models.Field:
    """The concrete field a record's key (a field name or an attname) names."""
    return cast(models.Field, meta.get_field(key))


@dataclass(frozen=True)
class Upserted:
    """What an upsert did: how many records it wrote (inserted or updated), and
    the conflict keys of those it left alone (a key's values as a tuple, or the
    one value of a one-column key), in no order."""

    written: int
    skipped: list


def upsert(
    model: type[models.Model],
    records: Iterable[dict],
    *,
    update: Iterable[str] | None = None,
    conflict: Iterable[str] = ("id",),
    newer_only: bool = False,
) -> Upserted:
    """Insert `records` (field name → value; `id` included) into `model`'s table.

    On a conflict on `conflict` (columns that are never NULL), update the
    fields in `update` (and `updated_at`), or do nothing when `update` is None.
    With `newer_only`, a stored row whose `source_updated_at` is newer than the
    record's is left as it is (ingest and the mirror both write these rows; the
    newer source time wins, under the row lock ON CONFLICT takes).

    The statement returns the keys of the records it did not write, usually
    none, rather than the thousands it did: a page's ids back as UUID objects,
    hashed into a set and looked up row by row cost more Python than the
    upsert's own COPY.
    """
    conflict = tuple(conflict)
    # By key, the last record of a key winning (and keeping the first's place).
    if len(conflict) == 1:
        by_key = {record.get(conflict[0]): record for record in records}
    else:
        by_key = {tuple(map(record.get, conflict)): record for record in records}
    rows = list(by_key.values())
    if not rows:
        return Upserted(0, [])
    meta = model._meta
    keys = _keys_stamped(meta, rows)
    # A record's keys are field names or attnames ("lease_id"): both resolve.
    fields = [_field(meta, key) for key in keys]
    constants = model_defaults(model, set(fields))
    key_columns = [_field(meta, c).column for c in conflict]
    if any(_field(meta, c).null for c in conflict):
        # NULLs never conflict, nor equal: the skipped rows could not be found.
        raise ValueError(f"{model.__name__}: conflict columns {conflict} must be NOT NULL")
    if not connection.in_atomic_block:
        # The staging table empties at every commit: COPY and INSERT must share one.
        raise RuntimeError("bulk.upsert runs inside transaction.atomic()")
    connection.ensure_connection()
    raw = connection.connection  # psycopg's connection: server-side binding below
    with Cursor(raw) as cur:
        stage = stage_fields(cur, meta.db_table, keys, fields, rows, prefix="mirror_stage")
        target = sql.Identifier(meta.db_table)
        columns = [f.column for f in fields] + [f.column for f, _ in constants]
        select = [sql.Identifier(f.column) for f in fields] + [
            sql.SQL("%s::{}").format(sql.SQL(db_type(f))) for f, _ in constants
        ]
        key = sql.SQL(", ").join(map(sql.Identifier, key_columns))
        cur.execute(
            sql.SQL(
                # In key order: every writer locks rows in the same order.
                "WITH written AS (INSERT INTO {t} ({cols}) SELECT {sel} FROM {stage} ORDER BY {key}"
                " ON CONFLICT ({key}) {on_conflict} RETURNING {key})"
                " SELECT {staged_key} FROM {stage} AS s WHERE NOT EXISTS"
                " (SELECT FROM written AS w WHERE {same})"
            ).format(
                t=target,
                cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
                sel=sql.SQL(", ").join(select),
                stage=sql.Identifier(stage),
                key=key,
                on_conflict=_on_conflict(meta, target, update, newer_only),
                staged_key=sql.SQL(", ").join(sql.Identifier("s", c) for c in key_columns),
                same=sql.SQL(" AND ").join(
                    sql.SQL("{} = {}").format(sql.Identifier("w", c), sql.Identifier("s", c))
                    for c in key_columns
                ),
            ),
            [adapt(f, value) for f, value in constants],
        )
        skipped = [row if len(row) > 1 else row[0] for row in cur.fetchall()]
    return Upserted(len(rows) - len(skipped), skipped)


def _keys_stamped(meta: Options, rows: list[dict]) -> list[str]:
    """Every key the records carry, in first-seen order, plus `created_at` and
    `updated_at` (stamped now on every record) when the model has them."""
    now = timezone.now()
    keys = list(dict.fromkeys(key for record in rows for key in record))
    for stamp in ("created_at", "updated_at"):
        if stamp not in keys and any(f.name == stamp for f in meta.concrete_fields):
            keys.append(stamp)
            for record in rows:
                record[stamp] = now
    return keys


def placeholders(
    model, ids: list, now: datetime, *, after: str | None = None
) -> tuple[sql.Composed, list]:
    """(statement, parameters) inserting a placeholder row per id into `model`,
    ON CONFLICT (id) DO NOTHING: INSERT … SELECT FROM unnest(ids), in id order
    (the order every writer takes its locks in, sorted by the server). The row holds
    the placeholder flag, the model's placeholder_defaults (a callable one
    evaluated per id, as MirroredModel.placeholder_for does) and its own
    defaults for the rest, as `upsert` would write them. With `after` (the
    name of an earlier CTE of the same statement, with a RETURNING clause),
    nothing is inserted before that CTE has run to its end."""
    meta = model._meta
    # One array per column whose value differs by id: the ids, and each callable default.
    arrays: list[tuple[models.Field, list]] = [(meta.pk, [_pk_value(meta, pk) for pk in ids])]
    given = {"placeholder": True, "created_at": now, "updated_at": now}
    for name, default in model.placeholder_defaults.items():
        if callable(default):
            arrays.append((_field(meta, name), [default(pk) for pk in ids]))
        else:
            given[name] = default
    named = {_field(meta, k) for k in (*given, *model.placeholder_defaults)}
    constants = model_defaults(model, named) + [(_field(meta, k), v) for k, v in given.items()]
    names = [sql.Identifier(f"v{i}") for i in range(len(arrays))]
    statement = sql.SQL(
        "INSERT INTO {t} ({cols}) SELECT {sel} FROM unnest({arrays}) AS u({names}){after}"
        " ORDER BY u.v0 ON CONFLICT ({pk}) DO NOTHING"
    ).format(
        # The subquery is evaluated once, before the first row, and reads `after` whole.
        after=sql.SQL(" WHERE (SELECT count(*) FROM {}) >= 0").format(sql.Identifier(after))
        if after
        else sql.SQL(""),
        t=sql.Identifier(meta.db_table),
        cols=sql.SQL(", ").join(sql.Identifier(f.column) for f, _ in (*arrays, *constants)),
        sel=sql.SQL(", ").join(
            [sql.SQL("u.{}").format(n) for n in names]
            + [sql.SQL("%s::{}").format(sql.SQL(db_type(f))) for f, _ in constants]
        ),
        arrays=sql.SQL(", ").join(
            sql.SQL("%s::{}[]").format(sql.SQL(db_type(f))) for f, _ in arrays
        ),
        names=sql.SQL(", ").join(names),
        pk=sql.Identifier(meta.pk.column),
    )
    # The select's constants come before the unnest arrays in the text; a uuid
    # array goes as one literal (`uuid_array`), not dumped an element at a time.
    return statement, [adapt(f, v) for f, v in constants] + [
        uuid_array(values) if isinstance(f, models.UUIDField) else values for f, values in arrays
    ]


def _pk_value(meta: Options, pk):
    return str(pk) if meta.pk.get_internal_type() != "UUIDField" else pk


def _on_conflict(
    meta: Options, target: sql.Identifier, update: Iterable[str] | None, newer_only: bool
) -> sql.Composable:
    """DO NOTHING, or DO UPDATE of `update` and `updated_at` (only over an
    older source time with `newer_only`)."""
    if update is None:
        return sql.SQL("DO NOTHING")
    assignments = [_field(meta, name).column for name in (*update, "updated_at")]
    on_conflict = sql.SQL("DO UPDATE SET {}").format(
        sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
            for c in dict.fromkeys(assignments)
        )
    )
    if newer_only:
        on_conflict += sql.SQL(
            " WHERE {t}.source_updated_at IS NULL OR EXCLUDED.source_updated_at IS NULL"
            " OR {t}.source_updated_at <= EXCLUDED.source_updated_at"
        ).format(t=target)
    return on_conflict
