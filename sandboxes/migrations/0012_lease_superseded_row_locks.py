"""The superseded refresh (0009) serialises writers of one sandbox with row locks,
not advisory locks.

An advisory lock per sandbox lives in PostgreSQL's shared lock table until the
transaction ends: a load_events file or a bulk insert naming more sandboxes than
the table holds (max_locks_per_transaction x max_connections, ~6,400 by
default) failed with "out of shared memory". Row locks live in the rows
themselves. The refresh now locks the existing rows of the sandboxes it is about
to recompute (in id order), then recomputes with a fresh snapshot: a concurrent
writer of the same sandbox holds one of those rows, so the two refreshes run one
after the other and the second sees the first's rows.
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
        PERFORM 1 FROM {TABLE} l
        WHERE (l.provider, l.provider_lease_id) IN (SELECT provider, provider_lease_id FROM {keys})
        ORDER BY l.id
        FOR UPDATE OF l;
        UPDATE {TABLE} l SET superseded = {_NEWER}
        WHERE (l.provider, l.provider_lease_id) IN (SELECT provider, provider_lease_id FROM {keys})
          AND l.superseded IS DISTINCT FROM {_NEWER};"""


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
        before = importlib.import_module("sandboxes.migrations.0009_lease_superseded")
        schema_editor.execute(before.PG_FUNCTION, params=None)


class Migration(migrations.Migration):
    dependencies = [("sandboxes", "0011_notice_period")]
    operations = [migrations.RunPython(forwards, backwards)]
