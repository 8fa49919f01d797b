"""The superseded refresh (0012) plans its two statements each time it runs.

PL/pgSQL plans a static statement without parameters once per session and
keeps that plan. The refresh's lookups of the sandboxes a statement touched
were planned while the lease table was still small (a fresh database, or a
`load_events` file that fills it inside one transaction, where ANALYZE never
sees the rows): a sequential scan of the whole table, checking every row's
newer-lease subquery, kept for every later statement however large the table
grew. Each 1,000-event batch then cost more than the one before (2.8 ms of
trigger time at the first batch, 5 ms at the tenth; quadratic over a file).

Run through EXECUTE, each statement is planned with the table's current size:
an index lookup per sandbox touched (lease_sandbox_newest), whatever the
table's history. The statements, their lock order and what they compute are
those of 0012.
"""

import importlib

from django.db import migrations

TABLE = "sandboxes_environmentlease"

_NEWER = f"""EXISTS (
    SELECT 1 FROM {TABLE} n
    WHERE n.provider = l.provider AND n.provider_lease_id = l.provider_lease_id
      AND n.acquired_at > l.acquired_at)"""


def _refresh(keys: str) -> str:
    return f"""
        EXECUTE $sql$
        SELECT 1 FROM {TABLE} l
        WHERE (l.provider, l.provider_lease_id) IN (SELECT provider, provider_lease_id FROM {keys})
        ORDER BY l.id
        FOR UPDATE OF l $sql$;
        EXECUTE $sql$
        UPDATE {TABLE} l SET superseded = {_NEWER}
        WHERE (l.provider, l.provider_lease_id) IN (SELECT provider, provider_lease_id FROM {keys})
          AND l.superseded IS DISTINCT FROM {_NEWER} $sql$;"""


_MOVED = """(
    SELECT k.provider, k.provider_lease_id
    FROM before_rows b JOIN after_rows a ON a.id = b.id,
         LATERAL (VALUES (b.provider, b.provider_lease_id),
                         (a.provider, a.provider_lease_id)) AS k(provider, provider_lease_id)
    WHERE (b.provider, b.provider_lease_id, b.acquired_at, b.superseded)
          IS DISTINCT FROM (a.provider, a.provider_lease_id, a.acquired_at, a.superseded)
    ) AS moved"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION console_lease_superseded() RETURNS trigger AS $$
BEGIN
    -- The refresh below updates this table: do not recurse into it.
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        {_refresh("after_rows")}
    ELSIF TG_OP = 'DELETE' THEN
        {_refresh("before_rows")}
    ELSE
        -- Only rows whose sandbox or acquired_at changed move anything (or
        -- whose flag a writer set, e.g. saving a model loaded before the flag
        -- changed: recomputed, so it never sticks). A status update, the most
        -- common, costs one join of the transition tables.
        IF NOT EXISTS (SELECT 1 FROM {_MOVED}) THEN
            RETURN NULL;
        END IF;
        {_refresh(_MOVED)}
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        before = importlib.import_module("sandboxes.migrations.0012_lease_superseded_row_locks")
        schema_editor.execute(before.PG_FUNCTION, params=None)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0014_listing_change_log")]
    operations = [migrations.RunPython(forwards, backwards)]
