"""The records a listing creates, written in one statement.

On PostgreSQL the new records travel as JSON, one array per column, into one
INSERT … SELECT (JSON as ingest sends its rows: docs/architecture.md,
"Recorded"): Django's psycopg backend binds
client-side, and bulk_create quoted every value of every record into the SQL
text in Python, most of a first listing's time. The statement also drops the
leases whose sandbox was retired and ignores conflicts, as the ORM path does.
Elsewhere (the embedded SQLite) bulk_create writes them.

Either way a new record holds the same fields: the listing's values, the
model's defaults for the rest, `listed_at` and `updated_at` now.
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from collections.abc import Sequence
from typing import Any, cast

import orjson
from django.db import connection, models
from django.utils import timezone

from sandboxes.models import Retirement
from sandboxes.models.choices import Stage
from sandboxes.staging import model_defaults

# What the listing decides of a new record, in the order `insert` sends them.
LISTED_FIELDS = (
    "id",
    "lease_id",
    "environment_id",
    "provider",
    "provider_lease_id",
    "kind",
    "stage",
    "holds",
    "hold_reasons",
    "next_attempt_at",
)
STAMPED_FIELDS = ("listed_at", "updated_at")

# The bits uuid.uuid4() sets in its 16 random bytes: version 4, RFC 4122 variant.
_V4_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_V4_SET = (4 << 76) | (0x8000 << 48)


def new_ids(n: int) -> list[uuid.UUID]:
    """n new record ids, each what uuid.uuid4() makes (16 bytes of os.urandom,
    version and variant set), the bytes read in one call: half the time of n
    uuid4() calls, a first sync's thousands of records."""
    data = os.urandom(16 * n)
    return [
        uuid.UUID(int=int.from_bytes(data[i : i + 16], "big") & _V4_KEEP | _V4_SET)
        for i in range(0, 16 * n, 16)
    ]


def create(rows: Sequence[dict]) -> list[str]:
    """Insert new records (`LISTED_FIELDS` each, by attname), but where the
    record's lease was retired on that very sandbox (a lease moved since names
    another one); conflicts ignored. Returns the ids of the records it tried,
    in the rows' order."""
    if not rows:
        return []
    if connection.vendor == "postgresql":
        return insert(rows)
    return create_orm(rows)


def create_orm(rows: Sequence[dict]) -> list[str]:
    """The ORM's way: the retired leases read, then bulk_create (2 queries)."""
    # Belt and braces: a lease whose sandbox was retired is never listed
    # again on that sandbox (a lease moved since names another one).
    retired = set(
        Retirement.objects.filter(
            lease_id__in=[r["lease_id"] for r in rows], stage=Stage.RETIRED
        ).values_list("lease_id", "provider", "provider_lease_id")
    )
    creates = [
        Retirement(**r)
        for r in rows
        if (r["lease_id"], r["provider"], r["provider_lease_id"]) not in retired
    ]
    made = Retirement.objects.bulk_create(creates, ignore_conflicts=True, batch_size=None)
    return [str(c.pk) for c in made]


def insert(rows: Sequence[dict]) -> list[str]:
    """PostgreSQL: one INSERT … SELECT over one JSON array per column (1 query).

    Each of `_COLUMNS` travels as one array of its values in the rows' order,
    read side by side (`ROWS FROM` json_array_elements_text): half the server's
    parsing of one object a row (json_to_recordset), and no dict a row here.
    Holds and hold lines go as indexes into two lists of the distinct ones (a
    fleet's records share a few hundred): half the text to quote, send and parse."""
    holds: dict[bytes, int] = {}
    reasons: dict[bytes, int] = {}
    arrays = [orjson.dumps([r[name] for r in rows]) for name in _COLUMNS]
    arrays.append(orjson.dumps([_index(holds, r["holds"]) for r in rows]))
    arrays.append(orjson.dumps([_index(reasons, r["hold_reasons"]) for r in rows]))
    _, constants = _fields()
    now = timezone.now()
    params = [
        Stage.RETIRED,
        *(array.decode() for array in arrays),
        _listed(holds),
        _listed(reasons),
        *(f.get_db_prep_save(value, connection) for f, value in constants),
        now,
        now,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_statement(), params)
        retired = {row[0] for row in cursor.fetchall()}
    ids = [r["id"] for r in rows]
    if retired:  # seldom: asking the empty set hashes each UUID all the same (in Python)
        ids = [pk for pk in ids if pk not in retired]
    # str() of each id, in C: orjson writes a UUID as str() does.
    return orjson.loads(orjson.dumps(ids))


# The listed fields that travel as their values (holds and hold_reasons as
# indexes: `insert`), and their names in the statement.
_COLUMNS = tuple(name for name in LISTED_FIELDS if name not in ("holds", "hold_reasons"))
_KEYS = tuple(f"c{i}" for i in range(len(_COLUMNS)))


def _index(distinct: dict[bytes, int], value: Any) -> int:
    return distinct.setdefault(orjson.dumps(value), len(distinct))


def _listed(distinct: dict[bytes, int]) -> str:
    """The distinct values as one JSON array, in index order."""
    return "[" + ",".join(v.decode() for v in distinct) + "]"


def _field(name: str) -> models.Field:
    """A concrete field by name or attname (`lease_id`)."""
    return cast(models.Field, Retirement._meta.get_field(name))


@functools.cache
def _fields() -> tuple[dict[str, models.Field], list[tuple[models.Field, Any]]]:
    """The listed fields by name, and (field, default) for every other column
    the model gives a value (nullable ones without a default are left NULL)."""
    listed = {name: _field(name) for name in LISTED_FIELDS}
    given = {*listed.values(), *(_field(name) for name in STAMPED_FIELDS)}
    return listed, model_defaults(Retirement, given)


@functools.cache
def _statement() -> str:
    """`r` is the rows, each flagged `retired` when its lease's record on that
    sandbox was retired; the INSERT writes the others, and the statement
    returns the retired ones' ids. Parameters: the retired stage, each column's
    array (`_COLUMNS`, then the holds' and the lines' indexes), the distinct
    holds and hold lines, each constant, then listed_at and updated_at. A
    value is read as its column's type without a length (varchar(64) as
    varchar): the INSERT refuses a value too long, a cast would cut it."""
    qn = connection.ops.quote_name
    meta = Retirement._meta
    listed, constants = _fields()
    key = dict(zip(_COLUMNS, _KEYS, strict=True))
    typed = ", ".join(
        f"j.{key[name]}::{_LENGTH.sub('', str(listed[name].db_type(connection)))} AS {key[name]}"
        for name in _COLUMNS
    )
    arrays = ", ".join(["json_array_elements_text(%s::json)"] * (len(_COLUMNS) + 2))
    stamped = [_field(name) for name in STAMPED_FIELDS]
    columns = [listed[name].column for name in _COLUMNS] + [
        f.column for f in (listed["holds"], listed["hold_reasons"], *(f for f, _ in constants))
    ]
    values = [f"r.{key[name]}" for name in _COLUMNS] + ["%s::jsonb -> r.h", "%s::jsonb -> r.w"]
    values += [f"%s::{f.db_type(connection)}" for f, _ in constants]
    columns += [f.column for f in stamped]
    values += [f"%s::{f.db_type(connection)}" for f in stamped]
    table = qn(meta.db_table)
    return (
        "WITH r AS MATERIALIZED ("
        f" SELECT r.*, EXISTS (SELECT 1 FROM {table} x WHERE x.lease_id = r.{key['lease_id']}"
        f" AND x.stage = %s AND x.provider = r.{key['provider']}"
        f" AND x.provider_lease_id = r.{key['provider_lease_id']}) AS retired"
        f" FROM (SELECT {typed}, j.h::int AS h, j.w::int AS w"
        f" FROM ROWS FROM ({arrays}) AS j({', '.join(_KEYS)}, h, w)) r"
        f"), made AS (INSERT INTO {table} ({', '.join(map(qn, columns))})"
        f" SELECT {', '.join(values)} FROM r WHERE NOT r.retired ON CONFLICT DO NOTHING)"
        f" SELECT r.{key['id']} FROM r WHERE retired"
    )


_LENGTH = re.compile(r"\(\d+\)$")  # a type's length: varchar(64)
